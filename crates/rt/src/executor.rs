//! The per-core executor: a task slab, a wake list any thread may push to, and the list of
//! outstanding copies it checks between tasks.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use switchyard_engine::{clock, Probe};
use switchyard_media::Persist;
use switchyard_mover::beside;

use crate::config::RuntimeConfig;

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// The id `block_on`'s own future wakes with.
const MAIN: usize = usize::MAX;
/// The executor thread's timer slack: how late the kernel may end its timed sleeps.
const TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// Tasks woken from any thread, and the executor's thread to unpark.
struct Woken {
    ids: Mutex<Vec<usize>>,
    thread: Thread,
}

struct TaskWaker {
    id: usize,
    woken: Arc<Woken>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken
            .ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.id);
        self.woken.thread.unpark();
    }
}

/// An outstanding copy: how to tell it finished, whom to wake, and when it should finish.
struct Outstanding {
    probe: Probe,
    waker: Waker,
    expected_ns: u64,
}

/// A per-core executor. Create it on the thread that runs it; it is neither `Send` nor `Sync`.
pub struct Executor {
    shared: Rc<Shared>,
}

struct Shared {
    tasks: RefCell<Vec<Option<Task>>>,
    /// The waker of each task slot, made once per slot (its id never changes).
    wakers: RefCell<Vec<Waker>>,
    free: RefCell<Vec<usize>>,
    woken: Arc<Woken>,
    io: RefCell<Vec<Outstanding>>,
    /// Tasks spawned while another one runs, queued until the loop picks them up.
    spawned: RefCell<Vec<Task>>,
    /// Whether an idle executor helps the engine with its outstanding copies.
    helping: Cell<bool>,
    /// The copy kernels it helps with.
    persist: Persist,
    /// When it wakes, spins and parks with copies outstanding (`[runtime]`).
    timing: Timing,
}

/// `[runtime]` in the units the loop uses.
struct Timing {
    /// How long past a copy's expected completion the executor spins before it parks, ns.
    spin_ns: u64,
    /// How long before a copy's expected completion a sleeping executor wakes to spin, ns.
    wake_early_ns: u64,
    /// Longest park while copies are outstanding (the expected completion time usually ends
    /// the park first).
    max_park: Duration,
}

thread_local!(static CURRENT: RefCell<Option<Rc<Shared>>> = const { RefCell::new(None) });

/// Sets the thread's current executor for the duration of a `block_on`.
struct Enter(Option<Rc<Shared>>);

impl Enter {
    fn new(shared: &Rc<Shared>) -> Enter {
        Enter(CURRENT.with(|c| c.replace(Some(shared.clone()))))
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// Registers an outstanding copy with the executor running this thread; hands the probe back
/// if none is.
pub(crate) fn wait_for(probe: Probe, expected_ns: u64, waker: &Waker) -> Result<(), Probe> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(s) => {
            s.io.borrow_mut().push(Outstanding {
                probe,
                waker: waker.clone(),
                expected_ns,
            });
            Ok(())
        }
        None => Err(probe),
    })
}

/// Spawns a task on the executor running this thread.
///
/// # Panics
/// Outside [`Executor::block_on`].
pub fn spawn<T: 'static>(fut: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    CURRENT.with(|c| {
        let c = c.borrow();
        let s = c
            .as_ref()
            .expect("switchyard_rt::spawn outside Executor::block_on");
        spawn_on(s, fut)
    })
}

fn spawn_on<T: 'static>(s: &Shared, fut: impl Future<Output = T> + 'static) -> JoinHandle<T> {
    let state = Rc::new(JoinState {
        value: Cell::new(None),
        waiter: Cell::new(None),
    });
    let st = state.clone();
    s.spawned.borrow_mut().push(Box::pin(async move {
        st.value.set(Some(fut.await));
        if let Some(w) = st.waiter.take() {
            w.wake();
        }
    }));
    JoinHandle { state }
}

struct JoinState<T> {
    value: Cell<Option<T>>,
    waiter: Cell<Option<Waker>>,
}

/// A spawned task's result, as a future.
pub struct JoinHandle<T> {
    state: Rc<JoinState<T>>,
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.state.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                self.state.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

impl Default for Executor {
    fn default() -> Self {
        Executor::new()
    }
}

impl Executor {
    /// An executor for the calling thread with the default `[runtime]` settings
    /// ([`Executor::with_config`]).
    pub fn new() -> Executor {
        Executor::with_config(&RuntimeConfig::default())
    }

    /// An executor for the calling thread that wakes, spins and parks as `config` says.
    /// Shortens the thread's timer slack to 1 µs, so that its sleeps until a copy's expected
    /// completion end on time.
    pub fn with_config(config: &RuntimeConfig) -> Executor {
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only the calling thread;
        // a failure leaves the default slack, which only makes sleeps less precise.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS) };
        Executor {
            shared: Rc::new(Shared {
                tasks: RefCell::new(Vec::new()),
                wakers: RefCell::new(Vec::new()),
                free: RefCell::new(Vec::new()),
                woken: Arc::new(Woken {
                    ids: Mutex::new(Vec::new()),
                    thread: std::thread::current(),
                }),
                io: RefCell::new(Vec::new()),
                spawned: RefCell::new(Vec::new()),
                helping: Cell::new(true),
                persist: Persist::detect(),
                timing: Timing {
                    spin_ns: config.spin_us * 1000,
                    wake_early_ns: config.wake_early_us * 1000,
                    max_park: Duration::from_micros(config.max_park_us),
                },
            }),
        }
    }

    /// Whether the executor, with no task to run, copies the tail of its outstanding engine
    /// copies itself while the engine works on their heads (on by default). Off, it only
    /// waits for them: the behaviour to compare with.
    pub fn set_helping(&self, on: bool) {
        self.shared.helping.set(on);
    }

    /// Spawns a task; it runs once [`Executor::block_on`] runs.
    pub fn spawn<T: 'static>(&self, fut: impl Future<Output = T> + 'static) -> JoinHandle<T> {
        spawn_on(&self.shared, fut)
    }

    /// Copies outstanding right now (for tests and statistics).
    pub fn outstanding(&self) -> usize {
        self.shared.io.borrow().len()
    }

    /// Runs `fut` and every spawned task until `fut` completes; returns its output.
    ///
    /// # Panics
    /// On another thread than the one that created the executor.
    pub fn block_on<T>(&self, fut: impl Future<Output = T>) -> T {
        let s = &self.shared;
        assert_eq!(
            std::thread::current().id(),
            s.woken.thread.id(),
            "an Executor runs on the thread that created it"
        );
        let _enter = Enter::new(s);
        let mut fut = pin!(fut);
        let main = Waker::from(Arc::new(TaskWaker {
            id: MAIN,
            woken: s.woken.clone(),
        }));
        let mut main_ready = true;
        loop {
            if main_ready {
                main_ready = false;
                beside::set_tasks_beside(s.live());
                let polled = fut.as_mut().poll(&mut Context::from_waker(&main));
                beside::set_tasks_beside(0);
                if let Poll::Ready(v) = polled {
                    return v;
                }
                s.check_io();
            }
            let mut ran = s.adopt_spawned();
            let ids = std::mem::take(&mut *s.woken.ids.lock().unwrap_or_else(|e| e.into_inner()));
            for id in ids {
                if id == MAIN {
                    main_ready = true;
                } else {
                    ran |= s.run(id);
                    // Between tasks: wake those whose copies finished.
                    s.check_io();
                }
            }
            if ran || main_ready {
                continue;
            }
            if s.check_io() > 0 {
                continue;
            }
            s.idle();
        }
    }
}

impl Shared {
    /// Moves freshly spawned tasks into the slab and schedules them; true if there were any.
    fn adopt_spawned(&self) -> bool {
        let new = std::mem::take(&mut *self.spawned.borrow_mut());
        let any = !new.is_empty();
        for t in new {
            let id = match self.free.borrow_mut().pop() {
                Some(id) => {
                    self.tasks.borrow_mut()[id] = Some(t);
                    id
                }
                None => {
                    let mut tasks = self.tasks.borrow_mut();
                    tasks.push(Some(t));
                    let id = tasks.len() - 1;
                    self.wakers
                        .borrow_mut()
                        .push(Waker::from(Arc::new(TaskWaker {
                            id,
                            woken: self.woken.clone(),
                        })));
                    id
                }
            };
            self.woken
                .ids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(id);
        }
        any
    }

    /// Polls task `id` once (a stale id of a finished task is ignored); true if it ran.
    fn run(&self, id: usize) -> bool {
        // Taken out of the slab while it runs, so it may spawn (and so touch the slab).
        let Some(mut task) = self.tasks.borrow_mut().get_mut(id).and_then(Option::take) else {
            return false;
        };
        let waker = self.wakers.borrow()[id].clone();
        // The mover sends this task's copies to a slower engine only if the core has other
        // tasks to run while it waits (`switchyard_mover::beside`).
        beside::set_tasks_beside(self.live().saturating_sub(1));
        let polled = task.as_mut().poll(&mut Context::from_waker(&waker));
        beside::set_tasks_beside(0);
        match polled {
            Poll::Ready(()) => self.free.borrow_mut().push(id),
            Poll::Pending => self.tasks.borrow_mut()[id] = Some(task),
        }
        true
    }

    /// Tasks spawned and not finished (the one running included; not the `block_on` future).
    fn live(&self) -> usize {
        self.tasks.borrow().len() - self.free.borrow().len() + self.spawned.borrow().len()
    }

    /// Wakes the tasks whose copies finished; returns how many.
    fn check_io(&self) -> usize {
        let mut io = self.io.borrow_mut();
        let before = io.len();
        io.retain(|o| {
            if o.probe.is_finished() {
                o.waker.wake_by_ref();
                false
            } else {
                true
            }
        });
        before - io.len()
    }

    /// Nothing to run: help the engine with an outstanding copy if there is work to take
    /// ([`Shared::help`]), or look again at once while a helpable copy is outstanding (its last
    /// descriptors are being copied). Else park until
    /// woken if no copy is outstanding; otherwise sleep until
    /// `wake_early_us` before the earliest copy's expected completion (the engine's worker
    /// wakes us sooner if a copy finishes first), then spin on the completions until one
    /// finishes or `spin_us` past the expected time; a copy later than that is waited for
    /// parked, the engine waking us, `max_park_us` at most (`[runtime]`).
    ///
    /// The timed sleep is accurate because [`Executor::with_config`] shortens the thread's timer slack
    /// (Linux's default 50 µs would oversleep a whole 256 KiB copy).
    fn idle(&self) {
        if self.helping.get() {
            if self.help() {
                return;
            }
            if self.io.borrow().iter().any(|o| o.probe.helpable()) {
                // A copy whose every descriptor is claimed finishes as soon as the engine is
                // through with it: watch for it rather than sleep past it, yielding the core to
                // an engine worker that may share it.
                std::thread::yield_now();
                return;
            }
        }
        let next = self.io.borrow().iter().map(|o| o.expected_ns).min();
        let Some(next) = next else {
            std::thread::park();
            return;
        };
        let finished = || self.io.borrow().iter().any(|o| o.probe.is_finished());
        let now = clock::now_ns();
        let t = &self.timing;
        if next > now + t.wake_early_ns {
            // Back in the loop either way: woken, timed out, or a copy had already finished.
            self.park_engine_woken(Duration::from_nanos(next - t.wake_early_ns - now));
            return;
        }
        let until = next.max(clock::now_ns()) + t.spin_ns;
        loop {
            for _ in 0..64 {
                if finished() {
                    // Wake its task now rather than on the loop's next pass.
                    self.check_io();
                    return;
                }
                std::hint::spin_loop();
            }
            if clock::now_ns() >= until {
                break;
            }
        }
        self.park_engine_woken(t.max_park);
    }

    /// Copies one descriptor from the tail of the outstanding engine copy expected to finish
    /// first that has descriptors left to take, running or still queued ([`Probe::help`]);
    /// true if it copied any. The core would otherwise sleep or spin until the copy finished:
    /// helping finishes it sooner and leaves the engine less to do, and the executor is back in
    /// its loop after one descriptor, so a task that becomes ready waits at most that long.
    fn help(&self) -> bool {
        let mut io = self.io.borrow_mut();
        io.sort_unstable_by_key(|o| o.expected_ns);
        io.iter().any(|o| o.probe.help(&self.persist) > 0)
    }

    /// Hands the outstanding copies' wakers to the engine and parks for `timeout` at most,
    /// unless a copy has already finished.
    fn park_engine_woken(&self, timeout: Duration) {
        for o in self.io.borrow().iter() {
            o.probe.register(&o.waker);
        }
        if !self.io.borrow().iter().any(|o| o.probe.is_finished()) {
            std::thread::park_timeout(timeout);
        }
    }
}
