//! One request, parsed once. The server turns each decoded argument list into a
//! [`Request`] as soon as it is decoded: the command's row ([`CommandSpec`]), its keys with
//! their hash slots and owning shards, and, for every command whose route depends on its
//! arguments, the parsed form ([`Form`]): a blocking pop or move and XREAD/XREADGROUP
//! ([`Blocking`]), TASK.FETCH, TASK.WAIT, TASK.EVENTS, TASK.WORKER, a script's `numkeys`,
//! and SORT's options. Admission, MULTI queueing, MONITOR, tracking, routing, parking and execution
//! all read this value; none of them parses the arguments again (mini-redis's shape: a frame
//! becomes one typed command, once).
//!
//! A form that does not parse is kept as [`Form::Malformed`]: its error is the command's
//! reply when it runs (after admission, so an unknown command, a wrong arity or a missing
//! AUTH are still answered first, and inside MULTI it is queued and answered at EXEC, as
//! Redis does).
//!
//! With one shard every key lives here, so no slot is computed (a GET pays nothing for
//! routing); with several, each key's slot is computed once, here.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::families::blocking::Blocking;
use crate::families::sort::SortArgs;
use crate::families::tasks::commands::{FetchAt, WaitArgs, WorkerArgs};
use crate::families::tasks::reports::EventsArgs;
use crate::slot::key_slot;
use crate::spec::{CommandSpec, FormKind};

/// A decoded command, looked up and parsed once.
#[derive(Clone, Default)]
pub struct Request {
    /// The arguments as decoded, the command's name first.
    pub args: Vec<Bytes>,
    spec: Option<&'static CommandSpec>,
    /// Each key's position among the arguments and its slot (the slot with several shards
    /// only). Empty for a fixed-key row on one shard, where the row's arithmetic gives them.
    keys: Vec<KeyAt>,
    /// Whether `keys` holds the keys (false: the row's fixed positions do).
    placed: bool,
    owners: Owners,
    form: Form,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("args", &self.args)
            .field("command", &self.spec.map(|s| s.name))
            .field("keys", &self.keys)
            .field("owners", &self.owners)
            .field("form", &self.form)
            .finish()
    }
}

/// One key of a request: where it is among the arguments, and its hash slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAt {
    pub position: u32,
    pub slot: u16,
}

/// Which shards own a request's keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Owners {
    /// It names no key (or could not be parsed far enough to name them).
    #[default]
    None,
    /// Every key lives on this shard.
    One(usize),
    /// Its keys span shards.
    Several,
}

/// The parsed form of a command whose route depends on its arguments.
#[derive(Clone, Debug, Default)]
pub enum Form {
    /// Nothing to parse beyond the keys (or an unknown command, or a wrong arity).
    #[default]
    Plain,
    /// The arguments do not parse: this error is the reply when the command runs.
    Malformed(Frame),
    Blocking(Box<Blocking>),
    /// TASK.FETCH, as positions among the arguments (`FetchAt::view` lends it).
    Fetch(FetchAt),
    Wait(Box<WaitArgs>),
    Events(Box<EventsArgs>),
    Worker(Box<WorkerArgs>),
    /// EVAL, EVALSHA, FCALL and their read-only forms: how many keys follow `numkeys`, or
    /// the error (FCALL answers it only once its function is found, as Redis does).
    Script(Result<usize, Frame>),
    /// SORT and SORT_RO's options.
    Sort(Box<SortArgs>),
}

impl Request {
    /// Looks `args` up and parses it, for a server of `shard_count` shards.
    pub fn new(args: Vec<Bytes>, shard_count: usize) -> Request {
        let mut request = Request {
            args,
            ..Request::default()
        };
        let spec = request
            .args
            .first()
            .and_then(|name| crate::table::lookup(name));
        request.prepare(spec, shard_count);
        request
    }

    /// A request for `args` whose row the caller already looked up (a script's
    /// `redis.call`), parsed once.
    pub fn with_spec(args: Vec<Bytes>, spec: &'static CommandSpec, shard_count: usize) -> Request {
        let mut request = Request {
            args,
            ..Request::default()
        };
        request.prepare(Some(spec), shard_count);
        request
    }

    /// Fills in what [`Request::new`] computes, for arguments already decoded into
    /// `self.args` (a connection reuses its requests, so decoding allocates nothing). Inline:
    /// for a fixed-key command on one shard (a GET) it is a few comparisons.
    #[inline]
    pub fn prepare(&mut self, spec: Option<&'static CommandSpec>, shard_count: usize) {
        self.spec = spec;
        self.keys.clear();
        self.placed = false;
        self.owners = Owners::None;
        let Some(spec) = spec else {
            self.set_form(Form::Plain);
            return;
        };
        if shard_count == 1
            && spec.form == FormKind::Plain
            && spec.movable_keys.is_none()
            && !crate::slot::mapped()
        {
            // One shard, fixed key positions (GET, SET …): the row says whether it has keys,
            // and every key is here. (A wrong arity is answered by admission before anything
            // reads this.)
            self.set_form(Form::Plain);
            if spec.first_key > 0 {
                self.owners = Owners::One(0);
            }
            return;
        }
        if !spec.arity_ok(self.args.len()) {
            self.set_form(Form::Plain);
            return;
        }
        self.prepare_parsed(spec, shard_count);
    }

    /// The rest of [`Request::prepare`]: the parsed form, and the keys' slots and owners.
    #[inline(never)]
    fn prepare_parsed(&mut self, spec: &'static CommandSpec, shard_count: usize) {
        self.set_form(parse_form(spec, &self.args));
        if shard_count > 1 || crate::slot::mapped() {
            self.place_keys(spec, shard_count);
        } else if spec.movable_keys.is_some() {
            // One shard: no slots, but the positions the key finder found are kept, so the
            // shard side never runs it again.
            self.list_keys(spec);
            if !self.keys.is_empty() {
                self.owners = Owners::One(0);
            }
        } else if self.names_keys(spec) {
            self.owners = Owners::One(0);
        }
    }

    /// Replaces the form. The forms a connection keeps between commands (plain, a fetch's
    /// positions, a script's numkeys: see [`Request::clear`]) hold nothing to drop, so the
    /// old one is not dropped (the drop glue is a call per command on the worker's path).
    #[inline]
    fn set_form(&mut self, form: Form) {
        if matches!(
            self.form,
            Form::Plain | Form::Fetch(_) | Form::Script(Ok(_))
        ) {
            const _: () = assert!(!std::mem::needs_drop::<FetchAt>());
            std::mem::forget(std::mem::replace(&mut self.form, form));
        } else {
            self.form = form;
        }
    }

    /// True when the request names at least one key (routing's view: a task command's
    /// queues and ids count as keys); the parsed forms say so without walking them (with
    /// one shard, where no key is placed).
    fn names_keys(&self, spec: &CommandSpec) -> bool {
        match &self.form {
            Form::Fetch(_) | Form::Wait(_) | Form::Events(_) | Form::Sort(_) => true,
            Form::Blocking(blocking) => !blocking.keys.is_empty(),
            Form::Script(Ok(numkeys)) => *numkeys > 0,
            Form::Worker(_) | Form::Malformed(_) | Form::Script(Err(_)) => false,
            Form::Plain => spec.first_key > 0,
        }
    }

    /// Lists each key's position, its slot not yet computed (one shard needs none;
    /// [`Request::place_keys`] computes them).
    fn list_keys(&mut self, spec: &CommandSpec) {
        let mut keys = std::mem::take(&mut self.keys);
        self.each_key_position(spec, |position| {
            keys.push(KeyAt {
                position: position as u32,
                slot: 0,
            })
        });
        self.keys = keys;
        self.placed = true;
    }

    /// Lets go of the arguments (they share the connection's read buffer), keeping the
    /// vectors for the next command.
    #[inline]
    pub fn clear(&mut self) {
        self.args.clear();
        // A form that holds argument bytes lets go of them too; the others (a fetch's
        // positions, a script's numkeys) are replaced by the next `prepare`.
        if !matches!(
            self.form,
            Form::Plain | Form::Fetch(_) | Form::Script(Ok(_))
        ) {
            self.form = Form::Plain;
        }
    }

    /// A copy that shares nothing with the connection's read buffer (a command queued by
    /// MULTI must not pin it): the arguments and every argument the form holds copied, the
    /// parse kept.
    pub fn detached(&self) -> Request {
        Request {
            args: self.args.iter().map(copy).collect(),
            spec: self.spec,
            keys: self.keys.clone(),
            placed: self.placed,
            owners: self.owners,
            form: self.form.detached(),
        }
    }

    #[inline]
    pub fn spec(&self) -> Option<&'static CommandSpec> {
        self.spec
    }

    #[inline]
    pub fn form(&self) -> &Form {
        &self.form
    }

    /// Which shards own the keys. With one shard, `One(0)` when it names any.
    #[inline]
    pub fn owners(&self) -> Owners {
        self.owners
    }

    /// The keys with their positions and slots (slots with several shards only; empty for
    /// a fixed-key row on one shard).
    pub fn placed_keys(&self) -> &[KeyAt] {
        &self.keys
    }

    /// The keys' positions as the parse found them, or `None` where the row's fixed
    /// positions give them (a fixed-key row on one shard: arithmetic, no parse). What the
    /// shard side reads instead of running a key finder again.
    #[inline]
    pub fn known_keys(&self) -> Option<&[KeyAt]> {
        self.placed.then_some(&self.keys[..])
    }

    /// Each key's position among the arguments, read from the parse (never a second one).
    pub fn key_positions(&self) -> Vec<usize> {
        if self.placed {
            return self.keys.iter().map(|k| k.position as usize).collect();
        }
        let mut positions = Vec::new();
        if let Some(spec) = self.spec.filter(|s| s.arity_ok(self.args.len())) {
            self.each_key_position(spec, |position| positions.push(position));
        }
        positions
    }

    /// Each key's position among the arguments and the shard that owns it, from the slots
    /// computed once (with one shard every key is shard 0's).
    pub fn key_owners(&self, shard_count: usize) -> Vec<(usize, usize)> {
        if shard_count == 1 {
            return self.key_positions().into_iter().map(|i| (i, 0)).collect();
        }
        self.keys
            .iter()
            .map(|k| {
                (
                    k.position as usize,
                    crate::slot::shard_of_slot(k.slot, shard_count),
                )
            })
            .collect()
    }

    /// The shard that owns the key at `position` among the arguments.
    pub fn owner_of_key(&self, position: usize, shard_count: usize) -> usize {
        match self.keys.iter().find(|k| k.position as usize == position) {
            Some(key) => crate::slot::shard_of_slot(key.slot, shard_count),
            None => crate::slot::shard_of(&self.args[position], shard_count),
        }
    }

    /// Computes each key's slot, and who owns them. In cluster mode a key whose slot is
    /// served elsewhere, or moves (`crate::slot::Placement`), makes the owners `Several`:
    /// the command then takes the path that checks each key's slot (a redirect, or ASKING).
    fn place_keys(&mut self, spec: &CommandSpec, shard_count: usize) {
        self.list_keys(spec);
        let mut owners = Owners::None;
        for key in &mut self.keys {
            key.slot = key_slot(&self.args[key.position as usize]);
            let owner = match crate::slot::placement(key.slot, shard_count) {
                crate::slot::Placement::Here(owner) => owner,
                _ => {
                    owners = Owners::Several;
                    continue;
                }
            };
            owners = match owners {
                Owners::None => Owners::One(owner),
                Owners::One(first) if first == owner => Owners::One(first),
                _ => Owners::Several,
            };
        }
        self.owners = owners;
    }

    /// Calls `found` with each key's position: from the parsed form when there is one (no
    /// second parse of `numkeys` or STREAMS), else from the row (its key finder, once).
    fn each_key_position(&self, spec: &CommandSpec, mut found: impl FnMut(usize)) {
        let argc = self.args.len();
        match &self.form {
            Form::Malformed(_) => {}
            Form::Blocking(blocking) => {
                let n = blocking.keys.len();
                match blocking.op {
                    // XREAD and XREADGROUP: the first half of what follows STREAMS.
                    crate::BlockOp::XRead { .. } | crate::BlockOp::XReadGroup(_) => {
                        (argc - 2 * n..argc - n).for_each(found)
                    }
                    // BLMPOP, BZMPOP: the keys after timeout and numkeys.
                    _ if spec.movable_keys.is_some() => (3..3 + n).for_each(found),
                    _ => spec.key_positions(&self.args).for_each(found),
                }
            }
            Form::Fetch(fetch) => {
                (1..fetch.queues_end).for_each(&mut found);
                (fetch.acks_from..argc).for_each(found);
            }
            Form::Wait(_) | Form::Events(_) => found(1),
            // A worker's home is its id's shard, but it touches no key there.
            Form::Worker(_) => {}
            Form::Script(Ok(numkeys)) => (3..3 + numkeys).for_each(found),
            Form::Sort(sort) => {
                found(1);
                if let Some(at) = sort.store_at {
                    found(at);
                }
            }
            Form::Script(Err(_)) => {}
            Form::Plain => spec.key_positions(&self.args).for_each(found),
        }
    }
}

fn copy(bytes: &Bytes) -> Bytes {
    Bytes::copy_from_slice(bytes)
}

impl Form {
    /// This form with every argument it holds copied (see [`Request::detached`]).
    fn detached(&self) -> Form {
        match self {
            Form::Blocking(blocking) => Form::Blocking(Box::new(blocking.detached())),
            Form::Wait(wait) => Form::Wait(Box::new(WaitArgs {
                id: copy(&wait.id),
                timeout_ms: wait.timeout_ms,
            })),
            Form::Events(events) => Form::Events(Box::new(EventsArgs {
                queue: copy(&events.queue),
                ..(**events).clone()
            })),
            Form::Worker(worker) => Form::Worker(Box::new(WorkerArgs {
                name: copy(&worker.name),
                options: worker.options,
            })),
            Form::Sort(sort) => Form::Sort(Box::new(sort.detached())),
            Form::Plain | Form::Malformed(_) | Form::Script(_) | Form::Fetch(_) => self.clone(),
        }
    }
}

/// Parses the form of command `spec` (arity checked).
fn parse_form(spec: &CommandSpec, args: &[Bytes]) -> Form {
    let form = match spec.form {
        FormKind::Plain => return Form::Plain,
        FormKind::Blocking => {
            crate::families::blocking::parse(spec.name, args).map(|b| Form::Blocking(Box::new(b)))
        }
        FormKind::Fetch => crate::families::tasks::commands::parse_fetch_at(args).map(Form::Fetch),
        FormKind::Wait => {
            crate::families::tasks::commands::parse_wait(args).map(|w| Form::Wait(Box::new(w)))
        }
        FormKind::Events => {
            crate::families::tasks::reports::parse_events(args).map(|e| Form::Events(Box::new(e)))
        }
        FormKind::Worker => {
            crate::families::tasks::commands::parse_worker(args).map(|w| Form::Worker(Box::new(w)))
        }
        FormKind::Script => return Form::Script(parse_numkeys(spec.name, args)),
        FormKind::Sort => crate::families::sort::parse(args, spec.name == "sort_ro")
            .map(|o| Form::Sort(Box::new(o))),
    };
    form.unwrap_or_else(Form::Malformed)
}

/// A script's `numkeys` (EVAL's at 2, FCALL's at 2), with each command's own errors.
pub fn parse_numkeys(name: &str, args: &[Bytes]) -> Result<usize, Frame> {
    crate::parse_count::count_parse(FormKind::Script);
    let more_than_args =
        || Frame::static_error("ERR Number of keys can't be greater than number of args");
    let negative = || Frame::static_error("ERR Number of keys can't be negative");
    let following = args.len() as i64 - 3;
    if name.starts_with("fcall") {
        return match crate::args::parse_i64(&args[2]) {
            None => Err(Frame::static_error("ERR Bad number of keys provided")),
            Some(n) if n > following => Err(more_than_args()),
            Some(n) if n < 0 => Err(negative()),
            Some(n) => Ok(n as usize),
        };
    }
    match crate::args::int_arg(&args[2])? {
        n if n < 0 => Err(negative()),
        n if n > following => Err(more_than_args()),
        n => Ok(n as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(line: &str, shards: usize) -> Request {
        let args = line
            .split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        Request::new(args, shards)
    }

    #[test]
    fn keys_are_placed_once_with_their_slots() {
        let get = request("GET foo", 4);
        assert_eq!(
            get.placed_keys(),
            &[KeyAt {
                position: 1,
                slot: key_slot(b"foo")
            }]
        );
        assert_eq!(get.owners(), Owners::One(usize::from(key_slot(b"foo")) % 4));
        assert_eq!(request("GET foo", 1).owners(), Owners::One(0));
        assert!(request("GET foo", 1).placed_keys().is_empty());
        assert_eq!(request("MSET {a}x 1 {a}y 2", 4).placed_keys().len(), 2);
        assert_eq!(request("PING", 4).owners(), Owners::None);
        assert_eq!(request("NOSUCH a", 4).spec().map(|s| s.name), None);
    }

    #[test]
    fn movable_keys_are_kept_on_one_shard_too() {
        let positions = |r: &Request| -> Option<Vec<u32>> {
            r.known_keys()
                .map(|keys| keys.iter().map(|k| k.position).collect())
        };
        // The key finder ran once, here; the shard reads what it found.
        let union = request("ZUNIONSTORE d 2 a b", 1);
        assert_eq!(positions(&union), Some(vec![1, 3, 4]));
        assert_eq!(union.owners(), Owners::One(0));
        // A fixed-key row needs no list: its row's arithmetic gives the keys.
        assert_eq!(positions(&request("GET k", 1)), None);
        assert_eq!(request("GET k", 1).owners(), Owners::One(0));
        // A FETCH's keys come from its form, on one shard.
        let fetch = request("TASK.FETCH q BLOCK 0 ACK id", 1);
        assert_eq!(positions(&fetch), None);
        assert_eq!(fetch.owners(), Owners::One(0));
        assert_eq!(fetch.key_positions(), vec![1, 5]);
        // A reused request forgets the last one's keys.
        let mut reused = union.clone();
        reused.clear();
        reused.args = request("GET k", 1).args;
        reused.prepare(crate::table::lookup(b"get"), 1);
        assert_eq!(positions(&reused), None);
        assert_eq!(reused.key_positions(), vec![1]);
    }

    #[test]
    fn forms_carry_their_keys() {
        let blmpop = request("BLMPOP 0 2 {q}a {q}b LEFT COUNT 2", 4);
        let Form::Blocking(blocking) = blmpop.form() else {
            panic!("a blocking form");
        };
        assert_eq!(blocking.keys, vec!["{q}a", "{q}b"]);
        let positions: Vec<u32> = blmpop.placed_keys().iter().map(|k| k.position).collect();
        assert_eq!(positions, [3, 4]);
        let xread = request("XREAD COUNT 1 BLOCK 5 STREAMS s1 s2 0 $", 4);
        let positions: Vec<u32> = xread.placed_keys().iter().map(|k| k.position).collect();
        assert_eq!(positions, [6, 7]);
        let fetch = request("TASK.FETCH q1 q2 BLOCK 0 ACK id1", 4);
        let positions: Vec<u32> = fetch.placed_keys().iter().map(|k| k.position).collect();
        assert_eq!(positions, [1, 2, 6]);
        let eval = request("EVAL return 2 k1 k2 a", 4);
        assert!(matches!(eval.form(), Form::Script(Ok(2))));
        assert_eq!(eval.placed_keys().len(), 2);
        assert!(matches!(
            request("BLPOP k -1", 4).form(),
            Form::Malformed(err) if err.is_error()
        ));
        assert_eq!(request("BLPOP k -1", 4).owners(), Owners::None);
        // A wrong arity is not parsed at all: the arity check answers it.
        assert!(matches!(request("BLPOP k", 4).form(), Form::Plain));
    }
}
