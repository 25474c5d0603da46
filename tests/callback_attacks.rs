//! The event and log closures, attacked: a closure that blocks holds up no other thread's builds
//! or hits; a closure whose drop installs another callback (its replacement drops it); a child
//! forked while a replacement waits for a blocked call can replace the callback; a panic whose
//! payload panics again when dropped still does not unwind into C; the event closure may replace
//! the log callback (another kind), never itself.

mod common;

use jitbridge::{CacheEventKind, CustomKernel, Device};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// A kernel no other process of this run has built: its body carries the process id and `salt`.
fn fresh_kernel(name: &str, salt: u32) -> CustomKernel {
    let value = (std::process::id() % 100_000) as f32 + salt as f32 / 8.0;
    let body = format!("out[thread_index()] = inp[thread_index()] + {value:.6}f;");
    common::f32_kernel(name, &body)
}

/// Runs `body` on a thread; a body that has not returned within LIMIT fails the test (a hang is
/// a deadlock: the thread is left behind).
fn within_limit<T: Send + 'static>(what: &str, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || send.send(body()));
    receive.recv_timeout(LIMIT).unwrap_or_else(|_| panic!("{what}: no return in {LIMIT:?}"))
}

/// A gate a blocked closure waits at until it is opened.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// Installs a closure that blocks at `gate` on the events of threads tagged "blocker" (after
/// saying so on `entered`), and passes others.
fn install_blocking(gate: &Arc<Gate>) -> mpsc::Receiver<()> {
    let (entered, inside) = mpsc::channel();
    let (gate, entered) = (gate.clone(), Mutex::new(entered));
    jitbridge::set_event_callback(move |e| {
        if e.tag == "blocker" && e.kind == CacheEventKind::BuildStart {
            let _ = entered.lock().unwrap().send(());
            gate.wait();
        }
    })
    .unwrap();
    inside
}

/// Starts a thread tagged "blocker" that builds a new kernel, whose event blocks the closure.
fn start_blocked_build(salt: u32) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        jitbridge::set_thread_tag("blocker").unwrap();
        fresh_kernel("attacks_blocked", salt).prepare(Device::cpu().unwrap()).unwrap();
    })
}

#[test]
fn a_blocked_closure_holds_up_no_other_thread() {
    let _serial = common::serial();
    let cpu = Device::cpu().unwrap();
    let warm = fresh_kernel("attacks_warm", 1);
    warm.prepare(cpu).unwrap();
    let gate = Arc::new(Gate::default());
    let inside = install_blocking(&gate);
    let blocked = start_blocked_build(2);
    inside.recv_timeout(LIMIT).expect("the closure was entered");
    // The closure is parked on its thread: this thread still hits, and builds (its own events
    // reach the closure, which lets them pass).
    within_limit("a hit and a build while the closure is blocked", move || {
        let cpu = Device::cpu().unwrap();
        warm.prepare(cpu).unwrap();
        fresh_kernel("attacks_beside", 3).prepare(cpu).unwrap();
    });
    gate.open();
    blocked.join().unwrap();
    jitbridge::clear_event_callback().unwrap();
}

/// Installs a callback of the kind `install` sets when dropped.
struct InstallOnDrop {
    install: fn(),
    dropped: Arc<AtomicBool>,
}

impl Drop for InstallOnDrop {
    fn drop(&mut self) {
        (self.install)();
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_closure_whose_drop_installs_another_callback() {
    let _serial = common::serial();
    let dropped = Arc::new(AtomicBool::new(false));
    let on_drop = InstallOnDrop {
        install: || jitbridge::set_event_callback(|_| {}).unwrap(),
        dropped: dropped.clone(),
    };
    jitbridge::set_event_callback(move |_| {
        let _keep = &on_drop;
    })
    .unwrap();
    within_limit("replacing the event closure", jitbridge::clear_event_callback).unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the replaced closure was dropped");
    jitbridge::clear_event_callback().unwrap();

    let dropped = Arc::new(AtomicBool::new(false));
    let on_drop = InstallOnDrop {
        install: || jitbridge::set_log_callback(|_| {}).unwrap(),
        dropped: dropped.clone(),
    };
    jitbridge::set_log_callback(move |_| {
        let _keep = &on_drop;
    })
    .unwrap();
    within_limit("replacing the log closure", jitbridge::clear_log_callback).unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the replaced closure was dropped");
    jitbridge::clear_log_callback().unwrap();
}

unsafe extern "C" {
    fn fork() -> i32;
    fn _exit(status: i32) -> !;
    fn alarm(seconds: u32) -> u32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
}

#[test]
fn a_child_forked_while_a_replacement_waits_replaces_the_callback() {
    let _serial = common::serial();
    let gate = Arc::new(Gate::default());
    let inside = install_blocking(&gate);
    let blocked = start_blocked_build(4);
    inside.recv_timeout(LIMIT).expect("the closure was entered");
    let replaced = Arc::new(AtomicBool::new(false));
    let done = replaced.clone();
    let replacer = std::thread::spawn(move || {
        jitbridge::clear_event_callback().unwrap();
        done.store(true, Ordering::SeqCst);
    });
    // The replacement waits for the blocked call; give it time to get there (if it has not, the
    // fork below tries less, never wrongly fails).
    std::thread::sleep(Duration::from_millis(300));
    assert!(!replaced.load(Ordering::SeqCst), "the replacement waits for the call in progress");
    // SAFETY: the child calls only the library (which is made to be used after fork), waits for
    // nothing of its parent's threads, and leaves with _exit; the alarm ends it if it hangs.
    let pid = unsafe { fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        unsafe { alarm(20) };
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let ok = jitbridge::set_event_callback(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .is_ok()
            && fresh_kernel("attacks_child", 5).prepare(Device::cpu().unwrap()).is_ok()
            && calls.load(Ordering::SeqCst) >= 2
            && jitbridge::clear_event_callback().is_ok();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { _exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: our own child; status is written.
    assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
    gate.open();
    blocked.join().unwrap();
    replacer.join().unwrap();
    assert!(replaced.load(Ordering::SeqCst));
    assert_eq!(
        status, 0,
        "the child could not replace the callback, build and see its events (wait status \
         {status:#x}; 0xe is SIGALRM: it hung)"
    );
}

/// A panic payload that panics again when dropped.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("the payload's drop panics too");
    }
}

#[test]
fn a_panic_whose_payload_panics_when_dropped_stays_out_of_c() {
    let _serial = common::serial();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    jitbridge::set_event_callback(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        std::panic::panic_any(PanicsOnDrop);
    })
    .unwrap();
    fresh_kernel("attacks_panics", 6)
        .prepare(Device::cpu().unwrap())
        .expect("the build that raised the events still works");
    assert!(calls.load(Ordering::SeqCst) >= 2, "each event reached the closure");
    jitbridge::clear_event_callback().unwrap();
}

#[test]
fn the_event_closure_may_replace_the_log_callback_but_not_itself() {
    let _serial = common::serial();
    let results = Arc::new(Mutex::new(Vec::new()));
    let sink = results.clone();
    jitbridge::set_event_callback(move |e| {
        if e.kind == CacheEventKind::BuildStart {
            let set = jitbridge::set_log_callback(|_| {}).is_ok();
            let cleared = jitbridge::clear_log_callback().is_ok();
            let itself = jitbridge::set_event_callback(|_| {}).is_err();
            sink.lock().unwrap().push((set, cleared, itself));
        }
    })
    .unwrap();
    within_limit("a build whose closure replaces the log callback", || {
        fresh_kernel("attacks_nested", 7).prepare(Device::cpu().unwrap()).unwrap()
    });
    jitbridge::clear_event_callback().unwrap();
    assert_eq!(
        *results.lock().unwrap(),
        [(true, true, true)],
        "(log set, log cleared, own refused)"
    );
}
