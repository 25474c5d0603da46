//! Captured graphs: a step's launches recorded once on a stream and replayed with one call.
//!
//! The borrows say what the C library asks of its callers: a capture holds its stream mutably
//! (no other launch reaches the stream meanwhile), a graph borrows the arrays it reads for as
//! long as it lives and those it writes in place mutably, and owns the arrays its launches
//! made; a replay takes the graph mutably, so no thread reads an array the graph writes while
//! a replay is being queued.

use crate::array::Array;
use crate::dtype::Scalar;
use crate::error::{Error, ErrorCode, check};
use crate::ffi;
use crate::kernel::{CustomKernel, LaunchShape};
use crate::stream::Stream;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// An array of a graph: made by one of its launches, or the caller's, written in place. Valid
/// with the capture (and then the graph) that returned it only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphArray {
    capture: u64,
    index: usize,
}

/// An input of a captured launch: the caller's array (borrowed as long as the graph lives), or
/// an array of the capture.
#[derive(Debug)]
pub enum GraphInput<'a> {
    /// The caller's array, read by every replay.
    Array(&'a Array),
    /// An array a launch earlier in the capture made or wrote.
    Captured(GraphArray),
}

impl<'a> From<&'a Array> for GraphInput<'a> {
    fn from(array: &'a Array) -> Self {
        GraphInput::Array(array)
    }
}

impl From<GraphArray> for GraphInput<'_> {
    fn from(array: GraphArray) -> Self {
        GraphInput::Captured(array)
    }
}

/// An output of a captured launch.
#[derive(Debug)]
pub enum GraphOutput<'a> {
    /// A new array of this shape, owned by the graph ([`Graph::array`] reads it).
    New(Vec<usize>),
    /// The caller's array, written in place by every replay: borrowed as long as the graph
    /// lives, and read through [`Graph::array`] meanwhile.
    InPlace(&'a mut Array),
    /// An array of the capture, written in place.
    Captured(GraphArray),
}

/// One launch of a capture: the fields of [`crate::Launch`] a graph takes (its stream is the
/// capture's).
#[derive(Debug, Default)]
pub struct GraphLaunch<'a> {
    /// The inputs, in the spec's order.
    pub inputs: Vec<GraphInput<'a>>,
    /// The scalars, in the spec's order: the values until [`Graph::set_scalar`] changes them.
    pub scalars: Vec<Scalar>,
    /// One per output, in the spec's order.
    pub outputs: Vec<GraphOutput<'a>>,
    /// How many threads run.
    pub shape: LaunchShape,
}

/// The arrays a graph writes or made.
enum Slot<'a> {
    Owned(Array),
    Borrowed(&'a mut Array),
}

impl Slot<'_> {
    fn array(&self) -> &Array {
        match self {
            Slot::Owned(array) => array,
            Slot::Borrowed(array) => array,
        }
    }
}

static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

/// A capture in progress on a stream ([`Stream::begin_capture`]): its launches are recorded,
/// not run. Tied to the thread that began it (not `Send`). Dropped without
/// [`Capture::end`], it ends and its graph is freed.
///
/// ```
/// # unsafe { std::env::set_var("JITBRIDGE_DISK_CACHE", "off") };
/// use jitbridge::*;
/// let cpu = Device::cpu()?;
/// // SAFETY: the body only adds, and subscripts its own arrays.
/// let step = unsafe {
///     CustomKernel::new(&KernelSpec {
///         name: "graph_doc_step",
///         inputs: &[("x", DType::F32)],
///         outputs: &[("y", DType::F32)],
///         scalars: &[("s", DType::F32)],
///         body: "y[thread_index()] = x[thread_index()] + s;",
///         options: CompileOptions { bounds_checks: true, ..Default::default() },
///         ..Default::default()
///     })?
/// };
/// let x = Array::from_slice(cpu, &[1.0f32, 2.0], &[2])?;
/// let mut stream = Stream::new(cpu)?;
/// let mut capture = stream.begin_capture()?;
/// let y = capture.launch(&step, GraphLaunch {
///     inputs: vec![(&x).into()],
///     scalars: vec![10.0f32.into()],
///     outputs: vec![GraphOutput::New(vec![2])],
///     shape: LaunchShape::Threads(2),
/// })?[0];
/// let z = capture.launch(&step, GraphLaunch {
///     inputs: vec![y.into()],
///     scalars: vec![100.0f32.into()],
///     outputs: vec![GraphOutput::New(vec![2])],
///     shape: LaunchShape::Threads(2),
/// })?[0];
/// let mut graph = capture.end()?;
/// for s in [0.0f32, 1.0] {
///     graph.set_scalar(0, 0, s)?;
///     graph.launch(&stream)?;
///     assert_eq!(graph.array(z).to_vec::<f32>()?, [101.0 + s, 102.0 + s]);
/// }
/// # Ok::<(), jitbridge::Error>(())
/// ```
pub struct Capture<'s, 'a> {
    stream: &'s mut Stream,
    id: u64,
    slots: Vec<Slot<'a>>,
    /// Launches recorded through this capture: any other the C graph holds came around it.
    launches: usize,
    ended: bool,
    _not_send: PhantomData<*const ()>,
}

impl Stream {
    /// Begins capturing launches on this stream (after its work so far is done): launches
    /// through the returned [`Capture`] are recorded, and [`Capture::end`] makes them a
    /// [`Graph`]. A stream installed as some thread's default is refused
    /// (`InvalidArgument`): a launch there would reach the capture without going through it.
    pub fn begin_capture<'a>(&mut self) -> Result<Capture<'_, 'a>, Error> {
        // SAFETY: `raw` is a live stream.
        let installed = unsafe { ffi::jb_stream_installations(self.raw()) };
        if installed > 0 {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the stream is installed as a thread's default ({installed} installation(s), \
                     a leaked guard among them perhaps): capture on a stream nobody installed"
                ),
            ));
        }
        // SAFETY: as above; the capture borrows the stream mutably until it ends.
        check(unsafe { ffi::jb_graph_begin_capture(self.raw()) })?;
        Ok(Capture {
            stream: self,
            id: NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed),
            slots: Vec::new(),
            launches: 0,
            ended: false,
            _not_send: PhantomData,
        })
    }
}

impl<'a> Capture<'_, 'a> {
    /// Records a launch of `kernel` (checked as a launch is) and returns its outputs, in
    /// order. Safe for a bounds-checked kernel; an `InvalidArgument` error for any other (see
    /// [`Capture::launch_unchecked`]).
    pub fn launch(
        &mut self,
        kernel: &CustomKernel,
        launch: GraphLaunch<'a>,
    ) -> Result<Vec<GraphArray>, Error> {
        if !kernel.bounds_checked() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "kernel '{}' is not bounds-checked, so a safe capture cannot vouch for its \
                     body: make it with CompileOptions {{ bounds_checks: true, .. }}, or use the \
                     unsafe launch_unchecked",
                    kernel.module_name()
                ),
            ));
        }
        // SAFETY: the kernel is bounds-checked: no subscript of its arrays is out of range, at
        // any replay, whatever its scalars; its maker vouched for the rest of its code.
        unsafe { self.launch_unchecked(kernel, launch) }
    }

    /// [`Capture::launch`] for any kernel, bounds-checked or not.
    ///
    /// # Safety
    ///
    /// As for [`CustomKernel::launch_unchecked`], for every replay of the graph: the body, on
    /// these arrays with their contents then and the scalars then set, subscripts them only in
    /// range.
    pub unsafe fn launch_unchecked(
        &mut self,
        kernel: &CustomKernel,
        launch: GraphLaunch<'a>,
    ) -> Result<Vec<GraphArray>, Error> {
        let mut inputs = Vec::with_capacity(launch.inputs.len());
        for input in &launch.inputs {
            inputs.push(match input {
                GraphInput::Array(array) => *array,
                GraphInput::Captured(a) => self.slot(*a)?.array(),
            });
        }
        let mut shapes: Vec<&[usize]> = Vec::with_capacity(launch.outputs.len());
        let mut in_place = Vec::with_capacity(launch.outputs.len());
        for output in &launch.outputs {
            match output {
                GraphOutput::New(shape) => {
                    shapes.push(shape);
                    in_place.push(std::ptr::null_mut());
                }
                GraphOutput::InPlace(array) => {
                    shapes.push(&[]);
                    in_place.push(array.raw());
                }
                GraphOutput::Captured(a) => {
                    shapes.push(&[]);
                    in_place.push(self.slot(*a)?.array().raw());
                }
            }
        }
        let mut args = kernel.raw_launch_args(&inputs, &launch.scalars, &shapes, launch.shape)?;
        args.in_place = in_place;
        let raw = args.as_launch(std::ptr::null_mut(), self.stream.raw());
        let mut made = vec![std::ptr::null_mut(); kernel.num_outputs];
        // SAFETY: every pointer is valid for the call; the library writes `num_outputs` arrays
        // (NULL for in-place ones). Arrays the graph writes are borrowed mutably or owned by the
        // capture; those it reads are borrowed for its life. The body is the caller's promise.
        check(unsafe { ffi::jb_custom_kernel_run(made.as_mut_ptr(), kernel.raw(), &raw) })?;
        self.launches += 1;
        let mut handles = Vec::with_capacity(launch.outputs.len());
        for (output, made) in launch.outputs.into_iter().zip(made) {
            handles.push(match output {
                GraphOutput::New(_) => self.push(Slot::Owned(Array::from_raw(made))),
                GraphOutput::InPlace(array) => self.push(Slot::Borrowed(array)),
                GraphOutput::Captured(a) => a,
            });
        }
        Ok(handles)
    }

    /// Ends the capture: the graph of its launches. An error (nothing kept) when nothing was
    /// launched or a launch failed meanwhile, and when a launch reached the stream around the
    /// capture (this thread's default-stream launches, where the stream is this thread's own
    /// default, [`Stream::thread_default`]): the graph would write arrays it does not borrow.
    pub fn end(mut self) -> Result<Graph<'a>, Error> {
        self.ended = true;
        let mut raw = std::ptr::null_mut();
        // SAFETY: this thread began the capture on the live stream (the capture is not Send).
        check(unsafe { ffi::jb_graph_end_capture(&mut raw, self.stream.raw()) })?;
        // SAFETY: `raw` is the live graph just made.
        let held = unsafe { ffi::jb_graph_launch_count(raw) };
        if held != self.launches {
            // SAFETY: ours, never launched.
            unsafe { ffi::jb_graph_free(raw) };
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "the capture recorded {held} launches, {} of them through it: the others \
                     reached the stream outside the capture (this thread's default stream is \
                     the capturing one), and the graph would write arrays it does not borrow; \
                     nothing was kept",
                    self.launches
                ),
            ));
        }
        Ok(Graph { raw, id: self.id, slots: std::mem::take(&mut self.slots), replayed: false })
    }

    fn push(&mut self, slot: Slot<'a>) -> GraphArray {
        self.slots.push(slot);
        GraphArray { capture: self.id, index: self.slots.len() - 1 }
    }

    fn slot(&self, a: GraphArray) -> Result<&Slot<'a>, Error> {
        match self.slots.get(a.index) {
            Some(slot) if a.capture == self.id => Ok(slot),
            _ => Err(Error::new(
                ErrorCode::InvalidArgument,
                "the graph array is another capture's".to_string(),
            )),
        }
    }
}

impl Drop for Capture<'_, '_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: as in `end`; the graph, if any, is freed at once.
        unsafe {
            ffi::jb_graph_end_capture(&mut raw, self.stream.raw());
            ffi::jb_graph_free(raw);
        }
    }
}

/// Launches captured once ([`Stream::begin_capture`]) and replayed with one call each, on any
/// stream of the device. A replay orders itself after the work that made what it reads and
/// after other streams' reads of what it writes, holds its buffers until it is done, and makes
/// the arrays it writes wait for it; the arrays it made are read through [`Graph::array`].
/// Dropping it waits for its replays.
pub struct Graph<'a> {
    raw: *mut ffi::jb_graph,
    id: u64,
    slots: Vec<Slot<'a>>,
    /// A replay was queued: the arrays the graph made hold what it wrote from then on.
    replayed: bool,
}

// SAFETY: a C graph may be launched and updated from any thread (the graph serializes them);
// the handle owns it, and its arrays are Send and Sync themselves.
unsafe impl Send for Graph<'_> {}
// SAFETY: the only `&self` methods read the arrays, which C allows from several threads.
unsafe impl Sync for Graph<'_> {}

impl Graph<'_> {
    /// Queues one replay on `stream`, with the scalars as set now. Safe when every captured
    /// launch is of a bounds-checked kernel; an `InvalidArgument` error otherwise (see
    /// [`Graph::launch_unchecked`]).
    pub fn launch(&mut self, stream: &Stream) -> Result<(), Error> {
        // SAFETY: `raw` is a live graph.
        if unsafe { ffi::jb_graph_bounds_checked(self.raw) } == 0 {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                "the graph holds launches of kernels that are not bounds-checked: replay it \
                 with the unsafe launch_unchecked"
                    .to_string(),
            ));
        }
        // SAFETY: every launch is bounds-checked.
        unsafe { self.launch_unchecked(stream) }
    }

    /// [`Graph::launch`] for any graph.
    ///
    /// # Safety
    ///
    /// As for [`Capture::launch_unchecked`], for this replay: each launch's body, on its
    /// arrays as they are now and with its scalars as set now, subscripts them only in range.
    pub unsafe fn launch_unchecked(&mut self, stream: &Stream) -> Result<(), Error> {
        // SAFETY: live graph and stream; `&mut self` keeps every other use of the arrays the
        // graph writes away while the replay is queued.
        check(unsafe { ffi::jb_graph_launch(self.raw, stream.raw()) })?;
        self.replayed = true;
        Ok(())
    }

    /// Sets scalar `index` of launch `launch` (capture order) for the replays queued from now
    /// on; one already queued keeps the value it had. The value's dtype must be the scalar's.
    pub fn set_scalar(
        &mut self,
        launch: usize,
        index: usize,
        value: impl Into<Scalar>,
    ) -> Result<(), Error> {
        let value = value.into().raw();
        // SAFETY: live graph and a valid scalar; the library checks the indices and dtype.
        check(unsafe { ffi::jb_graph_set_scalar(self.raw, launch, index, &value) })
    }

    /// How many launches the graph holds.
    pub fn launches(&self) -> usize {
        // SAFETY: `raw` is a live graph.
        unsafe { ffi::jb_graph_launch_count(self.raw) }
    }

    /// An array of the graph, or None when `a` is another graph's, or an array the graph made
    /// before its first replay is queued: until then its elements were never written (a bool
    /// one's bytes need not even be 0 or 1, which a kernel reading it may not meet).
    pub fn get(&self, a: GraphArray) -> Option<&Array> {
        let slot = (a.capture == self.id).then(|| self.slots.get(a.index)).flatten()?;
        match slot {
            Slot::Owned(_) if !self.replayed => None,
            slot => Some(slot.array()),
        }
    }

    /// An array of the graph: the output of its last replay.
    ///
    /// # Panics
    ///
    /// When `a` is another graph's, or an array the graph made and no replay was queued yet
    /// ([`Graph::get`]).
    pub fn array(&self, a: GraphArray) -> &Array {
        self.get(a).expect("the graph array is another graph's, or unwritten before a replay")
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the graph; its arrays (dropped after) outlive this call.
        unsafe { ffi::jb_graph_free(self.raw) }
    }
}

impl std::fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("launches", &self.launches()).finish()
    }
}
