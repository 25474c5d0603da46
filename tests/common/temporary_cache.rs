//! Tests never write the user's own disk cache: before `main`, each test process points
//! JITBRIDGE_CACHE_DIR at a fresh folder of its own, removed when the process exits. Processes
//! it starts inherit the folder (and leave removing it to the one that made it).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

const OWNER: &str = "JITBRIDGE_TEST_CACHE_OWNER";

static FOLDER: OnceLock<PathBuf> = OnceLock::new();

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> i32;
}

extern "C" fn remove_folder() {
    if let Some(dir) = FOLDER.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs from .init_array, before `main` and so before any thread: the one moment at which
/// changing the environment is sound, and before the library can have read it.
extern "C" fn use_a_temporary_cache() {
    if std::env::var_os(OWNER).is_some() {
        return;
    }
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("jitbridge-test-cache-{pid}"));
    let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier process with this PID
    // SAFETY: no other thread exists yet (see above).
    unsafe {
        std::env::set_var("JITBRIDGE_CACHE_DIR", &dir);
        std::env::set_var(OWNER, OsString::from(pid.to_string()));
    }
    FOLDER.set(dir).unwrap();
    // SAFETY: registers a plain function that only removes the folder.
    unsafe { atexit(remove_folder) };
}

#[used]
#[unsafe(link_section = ".init_array")]
static USE_A_TEMPORARY_CACHE: extern "C" fn() = use_a_temporary_cache;
