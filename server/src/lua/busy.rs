//! Scripts that run too long: Redis's `busy-reply-threshold`, SCRIPT KILL and SHUTDOWN
//! NOSAVE, over shards.
//!
//! Every shard has a [`ScriptSlot`] in the globals, filled while a script runs there. A Lua
//! count hook (our own C function, so it also runs in coroutines the script creates: Lua 5.1
//! copies a thread's hook into the threads it makes) checks the slot every
//! [`HOOK_INSTRUCTIONS`] instructions:
//!
//! - Past the threshold the script is *busy*: the shards it holds answer `-BUSY` to commands
//!   that need them (their waiting clients are woken to get it), instead of making them
//!   wait; shards it does not hold serve as usual, better than Redis's whole-server stall.
//!   So that clients of the script's own shard get their BUSY too, the hook then yields the
//!   script's coroutine now and then (mlua's async thread treats a bare yield as "poll me
//!   again"), letting the shard's network loop run a turn, when Lua allows a yield there: not
//!   inside a C call such as `pcall` (read off the thread's own call counters, below).
//! - SCRIPT KILL (from any client on any shard) sets the slot's `kill` flag; if the script
//!   has written nothing, the hook raises an error, and then raises it again at every
//!   instruction (the hook count drops to 1), so no `pcall` or coroutine can swallow it. A
//!   script that has written cannot be killed (UNKILLABLE, as Redis): only SHUTDOWN NOSAVE
//!   ends it, by ending the process.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mlua::ffi;

/// Instructions between two hook calls: about 50 µs of Lua, so a busy script notices a kill
/// or lets its shard turn within well under a millisecond.
pub const HOOK_INSTRUCTIONS: c_int = 10_000;

pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";
pub const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";

/// The registry name of the table of threads the hook may yield (`lua::sandbox`).
pub const TRANSPARENT: &str = "wetask_transparent";
/// The registry name of the table the hook marks the threads it pauses in.
pub const PAUSED: &str = "wetask_paused";

/// registry[PAUSED][state] = true, so the sandbox's resume passes the pause on.
///
/// # Safety
/// `state` must be a live Lua 5.1 thread running a hook.
unsafe fn mark_paused(state: *mut ffi::lua_State) {
    // SAFETY: balanced pushes and pops on the hooked thread's own stack.
    unsafe {
        ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, c"wetask_paused".as_ptr());
        if ffi::lua_type(state, -1) == ffi::LUA_TTABLE {
            ffi::lua_pushthread(state);
            ffi::lua_pushboolean(state, 1);
            ffi::lua_rawset(state, -3);
        }
        ffi::lua_pop(state, 1);
    }
}

/// True when the hook may yield `state`: it is the script's own thread (`main`), or a
/// `pcall`'s coroutine whose parents up to `main` are all such coroutines
/// (registry[TRANSPARENT] maps each to its parent), and no thread on that chain is inside
/// a C call (Lua would refuse the yield, or a parent's pass-on yield, with an error).
///
/// # Safety
/// `state` must be a live Lua 5.1 thread running a hook (which has stack room), `main` the
/// script's thread.
unsafe fn yieldable(state: *mut ffi::lua_State, main: *mut ffi::lua_State) -> bool {
    // SAFETY: per the caller; pushes and pops on the hooked thread's own stack, balanced
    // by the final settop.
    unsafe {
        if !may_yield(state) {
            return false;
        }
        if state == main {
            return true;
        }
        ffi::lua_getfield(
            state,
            ffi::LUA_REGISTRYINDEX,
            c"wetask_transparent".as_ptr(),
        );
        let table = ffi::lua_gettop(state);
        if ffi::lua_type(state, table) != ffi::LUA_TTABLE {
            ffi::lua_settop(state, table - 1);
            return false;
        }
        ffi::lua_pushthread(state);
        let ok = loop {
            // The key on top becomes its parent thread (or nil: not a pcall's).
            ffi::lua_rawget(state, table);
            let parent = ffi::lua_tothread(state, -1);
            if parent.is_null() || !no_c_call_between(parent) {
                break false;
            }
            if parent == main {
                break true;
            }
        };
        ffi::lua_settop(state, table - 1);
        ok
    }
}

/// The script running on one shard, as every shard may see it.
#[derive(Default)]
pub struct ScriptSlot {
    /// The lock token of the running script (0: none).
    pub token: AtomicU64,
    /// Past the busy threshold.
    pub busy: AtomicBool,
    /// It ran a write command.
    pub wrote: AtomicBool,
    /// SCRIPT KILL asked for it.
    pub kill: AtomicBool,
}

impl ScriptSlot {
    pub fn begin(&self, token: u64) {
        self.busy.store(false, Ordering::Relaxed);
        self.wrote.store(false, Ordering::Relaxed);
        self.kill.store(false, Ordering::Relaxed);
        self.token.store(token, Ordering::Release);
    }

    pub fn end(&self) {
        self.token.store(0, Ordering::Release);
        self.busy.store(false, Ordering::Release);
        self.kill.store(false, Ordering::Relaxed);
    }

    fn busy_token(&self) -> Option<u64> {
        let token = self.token.load(Ordering::Acquire);
        (token != 0 && self.busy.load(Ordering::Acquire)).then_some(token)
    }
}

/// True when the operation holding lock `token` is a script past its busy threshold.
pub fn holder_is_busy(slots: &[ScriptSlot], token: u64) -> bool {
    slots.iter().any(|s| s.busy_token() == Some(token))
}

/// True when some script, on any shard, is past its busy threshold.
pub fn any_busy(slots: &[ScriptSlot]) -> bool {
    slots.iter().any(|s| s.busy_token().is_some())
}

/// SCRIPT KILL: stops every busy script that has written nothing.
pub fn kill(slots: &[ScriptSlot]) -> Result<(), &'static str> {
    let busy: Vec<&ScriptSlot> = slots.iter().filter(|s| s.busy_token().is_some()).collect();
    if busy.is_empty() {
        return Err(NOTBUSY);
    }
    if busy.iter().any(|s| s.wrote.load(Ordering::Acquire)) {
        return Err(UNKILLABLE);
    }
    for slot in busy {
        slot.kill.store(true, Ordering::Release);
    }
    Ok(())
}

/// What the hook of the script running on this thread needs.
struct Watch {
    slots: Arc<[ScriptSlot]>,
    shard: usize,
    main: *mut ffi::lua_State,
    started: Instant,
    threshold_ms: Arc<AtomicU64>,
    killing: bool,
}

thread_local! {
    static WATCH: RefCell<Option<Watch>> = const { RefCell::new(None) };
}

/// Starts watching the script about to run on `thread` (this shard's), holding lock
/// `token`: fills the shard's slot and installs the hook. Dropping the guard ends both.
pub fn watch(
    slots: &Arc<[ScriptSlot]>,
    threshold_ms: &Arc<AtomicU64>,
    shard: usize,
    token: u64,
    thread: &mlua::Thread,
) -> Watching {
    let main = thread.to_pointer() as *mut ffi::lua_State;
    slots[shard].begin(token);
    WATCH.with(|w| {
        *w.borrow_mut() = Some(Watch {
            slots: slots.clone(),
            shard,
            main,
            started: Instant::now(),
            threshold_ms: threshold_ms.clone(),
            killing: false,
        })
    });
    // SAFETY: `main` is the live thread mlua just created (a thread's pointer is its
    // lua_State); the hook only reads the thread-local watch and calls Lua's own API.
    unsafe { ffi::lua_sethook(main, Some(hook), ffi::LUA_MASKCOUNT, HOOK_INSTRUCTIONS) };
    Watching {
        slots: slots.clone(),
        shard,
    }
}

/// The running script's watch; see [`watch`].
pub struct Watching {
    slots: Arc<[ScriptSlot]>,
    shard: usize,
}

impl Drop for Watching {
    fn drop(&mut self) {
        WATCH.with(|w| w.borrow_mut().take());
        self.slots[self.shard].end();
    }
}

enum Action {
    Continue,
    Yield,
    Kill,
}

/// The first fields of Lua 5.1.5's `struct lua_State` (lstate.h), up to the two C-call
/// counters: `lua_yield` refuses (with an error the script would see) when `nCcalls >
/// baseCcalls`, so the hook yields only when they are equal. The layout is pinned by the
/// vendored Lua (lua-src 547, Lua 5.1.5); a unit test checks the reading.
#[repr(C)]
struct LuaStateHead {
    next: *mut u8,
    tt: u8,
    marked: u8,
    status: u8,
    top: *mut u8,
    base: *mut u8,
    l_g: *mut u8,
    ci: *mut u8,
    savedpc: *const u32,
    stack_last: *mut u8,
    stack: *mut u8,
    end_ci: *mut u8,
    base_ci: *mut u8,
    stacksize: c_int,
    size_ci: c_int,
    n_ccalls: u16,
    base_ccalls: u16,
}

/// True when no C call separates `state`'s running code from its resume (Lua refuses a
/// yield across one).
///
/// # Safety
/// `state` must be a live Lua 5.1 thread.
unsafe fn no_c_call_between(state: *mut ffi::lua_State) -> bool {
    // SAFETY: per the caller, `state` points at a lua_State, whose head has this layout.
    let head = unsafe { &*(state as *const LuaStateHead) };
    head.n_ccalls == head.base_ccalls
}

/// Lua 5.1's opcodes that take their operand count from the stack top when B is 0 (a
/// previous multi-value OP_CALL or OP_VARARG left it there, possibly past the frame's own
/// top): OP_CALL, OP_TAILCALL, OP_RETURN, OP_SETLIST (lopcodes.h).
const TOP_USERS: [u32; 4] = [28, 29, 30, 34];

/// True when a hook running on `state` may yield it: no C call in between, and the
/// instruction about to run does not read a stack top left past the frame (a yield there
/// would resume fine, but Lua's API checks forbid resuming such a thread).
///
/// # Safety
/// `state` must be a live Lua 5.1 thread inside a count hook (its `savedpc` then points
/// just past the instruction about to run).
unsafe fn may_yield(state: *mut ffi::lua_State) -> bool {
    // SAFETY: per the caller, `state` points at a lua_State, whose head has this layout,
    // and `savedpc - 1` at the instruction the VM is about to execute.
    unsafe {
        let head = &*(state as *const LuaStateHead);
        if !no_c_call_between(state) {
            return false;
        }
        if head.savedpc.is_null() {
            return true;
        }
        let instruction = *head.savedpc.sub(1);
        let opcode = instruction & 0x3f;
        let b = (instruction >> 23) & 0x1ff;
        !(TOP_USERS.contains(&opcode) && b == 0)
    }
}

unsafe extern "C-unwind" fn hook(state: *mut ffi::lua_State, _ar: *mut ffi::lua_Debug) {
    let action = WATCH.with(|w| {
        let mut w = w.borrow_mut();
        let Some(watch) = w.as_mut() else {
            return Action::Continue;
        };
        let slot = &watch.slots[watch.shard];
        if watch.killing || slot.kill.load(Ordering::Acquire) {
            watch.killing = true;
            return Action::Kill;
        }
        let threshold = watch.threshold_ms.load(Ordering::Relaxed);
        if threshold == 0 || watch.started.elapsed().as_millis() < u128::from(threshold) {
            return Action::Continue;
        }
        if !slot.busy.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                shard = watch.shard,
                "a script has run past busy-reply-threshold ({threshold} ms): the shards it holds answer BUSY; SCRIPT KILL or SHUTDOWN NOSAVE stop it"
            );
        }
        // SAFETY: `state` is the running thread the hook was called for.
        if unsafe { yieldable(state, watch.main) } {
            Action::Yield
        } else {
            Action::Continue
        }
    });
    match action {
        Action::Continue => {}
        Action::Yield => {
            // SAFETY: the hooked thread, with a hook's stack room.
            unsafe { mark_paused(state) };
            // SAFETY: a count hook on a thread with no C call in between may yield (Lua 5.1
            // resumes it where it stopped); checked by `may_yield`.
            unsafe { ffi::lua_yield(state, 0) };
        }
        Action::Kill => {
            // SAFETY: raising a Lua error from a hook is how Lua stops a thread; no Rust
            // value with a destructor is alive in this frame. Every later instruction raises
            // again, so pcall cannot swallow it.
            unsafe {
                ffi::lua_sethook(state, Some(hook), ffi::LUA_MASKCOUNT, 1);
                if let Some(main) = WATCH.with(|w| w.borrow().as_ref().map(|w| w.main)) {
                    ffi::lua_sethook(main, Some(hook), ffi::LUA_MASKCOUNT, 1);
                }
                ffi::lua_pushstring(state, c"Script killed by user with SCRIPT KILL...".as_ptr());
                ffi::lua_error(state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The call counters read off the thread are the ones Lua checks: equal at a script's
    /// top level, different inside pcall.
    #[test]
    fn the_c_call_counters_tell_where_a_yield_is_allowed() {
        thread_local! {
            static SEEN: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
        }
        unsafe extern "C-unwind" fn count(state: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
            // SAFETY: a live thread.
            let ok = unsafe { may_yield(state) };
            SEEN.with(|s| s.borrow_mut().push(ok));
        }
        let lua = mlua::Lua::new();
        let function = lua
            .load("local n = 0 for i = 1, 100 do n = n + i end pcall(function() for i = 1, 100 do n = n + i end end) return n")
            .into_function()
            .expect("compiles");
        let thread = lua.create_thread(function).expect("thread");
        let state = thread.to_pointer() as *mut ffi::lua_State;
        // SAFETY: `state` is the live thread.
        unsafe { ffi::lua_sethook(state, Some(count), ffi::LUA_MASKCOUNT, 1) };
        let n: i64 = thread.resume(()).expect("runs");
        assert_eq!(n, 10100);
        let flags = SEEN.with(|s| s.borrow().clone());
        // The top-level loop comes first: every instruction there may yield; inside the
        // pcall'd function none may.
        assert!(flags[..50].iter().all(|&ok| ok));
        assert!(
            flags.iter().filter(|&&ok| !ok).count() > 100,
            "inside pcall"
        );
    }
}
