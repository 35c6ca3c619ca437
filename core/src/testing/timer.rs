//! Timers for the latency wrapper, injected so core needs no runtime.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
// A real thread, never modelled by loom: plain std primitives.
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs a task at (or just after) a deadline.
pub trait Timer: Send + Sync + fmt::Debug {
    /// Runs `task` at `deadline`, on whatever thread the timer uses.
    fn at(&self, deadline: Instant, task: Box<dyn FnOnce() + Send>);
}

/// A timer on its own thread. It sleeps until shortly before the next
/// deadline and spins (yielding) for the rest, so deadlines are met within
/// microseconds, not the tens of microseconds of a plain sleep. Tasks run on
/// the timer thread in deadline order; tasks still pending when the last
/// handle is dropped run at once.
#[derive(Clone)]
pub struct ThreadTimer {
    handle: Arc<Handle>,
}

impl fmt::Debug for ThreadTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadTimer").finish_non_exhaustive()
    }
}

struct Handle(Arc<Shared>);

impl Drop for Handle {
    fn drop(&mut self) {
        lock(&self.0.state).shutdown = true;
        self.0.cv.notify_all();
    }
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

struct State {
    heap: BinaryHeap<Task>,
    seq: u64,
    shutdown: bool,
}

struct Task {
    at: Instant,
    seq: u64,
    run: Box<dyn FnOnce() + Send>,
}

impl PartialEq for Task {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.seq == o.seq
    }
}
impl Eq for Task {}
impl PartialOrd for Task {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for Task {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> CmpOrdering {
        o.at.cmp(&self.at).then(o.seq.cmp(&self.seq))
    }
}

/// Below this, spin instead of sleeping.
const SPIN: Duration = Duration::from_micros(150);

impl ThreadTimer {
    /// Starts the timer thread.
    pub fn new() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                seq: 0,
                shutdown: false,
            }),
            cv: Condvar::new(),
        });
        let s2 = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("pagestream-timer".into())
            .spawn(move || run(&s2))
            .expect("spawn timer thread");
        ThreadTimer {
            handle: Arc::new(Handle(shared)),
        }
    }
}

impl Default for ThreadTimer {
    fn default() -> Self {
        Self::new()
    }
}

fn run(s: &Shared) {
    let mut st = lock(&s.state);
    loop {
        let now = Instant::now();
        let next = st.heap.peek().map(|t| t.at);
        match next {
            None if st.shutdown => return,
            None => {
                st = s.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            Some(at) if at <= now || st.shutdown => {
                let mut due = Vec::new();
                while let Some(t) = st.heap.peek() {
                    if t.at <= now || st.shutdown {
                        due.extend(st.heap.pop());
                    } else {
                        break;
                    }
                }
                drop(st);
                for t in due {
                    (t.run)();
                }
                st = lock(&s.state);
            }
            Some(at) => {
                let wait = at - now;
                if wait > SPIN {
                    st =
                        s.cv.wait_timeout(st, wait - SPIN)
                            .map(|(g, _)| g)
                            .unwrap_or_else(|p| p.into_inner().0);
                } else {
                    drop(st);
                    while Instant::now() < at {
                        std::thread::yield_now();
                    }
                    st = lock(&s.state);
                }
            }
        }
    }
}

impl Timer for ThreadTimer {
    fn at(&self, deadline: Instant, task: Box<dyn FnOnce() + Send>) {
        let shared = &self.handle.0;
        let mut st = lock(&shared.state);
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|t| deadline < t.at);
        st.heap.push(Task {
            at: deadline,
            seq,
            run: task,
        });
        drop(st);
        if earliest {
            shared.cv.notify_one();
        }
    }
}
