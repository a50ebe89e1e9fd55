//! Where FUNCTION LOAD's libraries go besides the process-wide registry
//! (`lua::library::Registry`): `functions.rdb` beside the journals, in FUNCTION DUMP's format,
//! rewritten whole on every change and loaded at start; and a replica's copy. Every change
//! publishes the registry's dump to the replication state (`Replication::set_functions`);
//! the primary's stream of shard 0 sends it at its start and after each change, and a
//! replica's shard 0 replaces its own registry with it ([`replace_from_primary`]), as
//! Redis's replicas take FUNCTION LOAD from their primary. In consensus mode the set goes
//! through the metadata group's log instead ([`replace_from_log`]). The commands
//! themselves are `commands::functions`.

use bytes::Bytes;
use wetask_protocol::Frame;

use crate::globals::Globals;
use crate::lua::library::{self, Library};

/// The RDB opcode of one library in a FUNCTION DUMP payload (Redis's `RDB_OPCODE_FUNCTION2`).
const RDB_OPCODE_FUNCTION2: u8 = 245;
/// The file the registry is kept in, in the data directory.
const FILE: &str = "functions.rdb";

/// After every change of the registry: saves it and tells the replicas.
pub fn changed(g: &Globals) {
    if let Err(e) = save(g) {
        tracing::error!("cannot save the function libraries: {e}");
    }
    g.replication.set_functions(Bytes::from(dump(g)));
}

/// Every library in Redis's FUNCTION DUMP format: an RDB_OPCODE_FUNCTION2 and the code per
/// library, then the RDB version and CRC64 (`wetask_shards::persist::rdb::frame`).
pub fn dump(g: &Globals) -> Vec<u8> {
    let mut body = Vec::new();
    for l in g.functions.lock().expect("functions").libraries() {
        body.push(RDB_OPCODE_FUNCTION2);
        wetask_shards::persist::rdb::put_string(&mut body, &l.code);
    }
    wetask_shards::persist::rdb::frame(body)
}

/// The libraries a FUNCTION DUMP payload holds, loaded and checked (`limited`: each load
/// within Redis's time limit, as FUNCTION RESTORE's are).
pub fn parse_dump(g: &Globals, payload: &[u8], limited: bool) -> Result<Vec<Library>, Frame> {
    let body = wetask_shards::persist::rdb::verified_body(payload).ok_or(Frame::static_error(
        "ERR DUMP payload version or checksum are wrong",
    ))?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        if body[at] != RDB_OPCODE_FUNCTION2 {
            return Err(Frame::static_error("ERR given type is not a function"));
        }
        let (code, used) = wetask_shards::persist::rdb::read_string(&body[at + 1..]).ok_or(
            Frame::static_error("ERR failed loading the given functions payload"),
        )?;
        at += 1 + used;
        out.push(library::load(&code, &g.config.announce_version, limited).map_err(Frame::error)?);
    }
    Ok(out)
}

/// On a replica: the primary's libraries, in FUNCTION DUMP's format, replace this node's
/// (all or nothing). An error names why; the registry is then left as it was.
pub fn replace_from_primary(g: &Globals, payload: &[u8]) -> Result<(), String> {
    let text = |err: Frame| match err {
        Frame::Error(text) => String::from_utf8_lossy(&text).into_owned(),
        other => format!("{other:?}"),
    };
    let libraries = parse_dump(g, payload, false).map_err(text)?;
    let mut fresh = library::Registry::default();
    for l in libraries {
        fresh.add(l, false)?;
    }
    g.functions.lock().expect("functions").replace_with(fresh);
    changed(g);
    Ok(())
}

/// Consensus mode: the set the metadata group's log or snapshot carries (`None`: none)
/// replaces this node's (`wetask_shards::shard::functions`). A set that does not load here
/// (another build's Lua, say) is logged and this node's registry is left as it was.
pub fn replace_from_log(g: &Globals, set: Option<Bytes>) {
    let result = match set {
        Some(dump) => replace_from_primary(g, &dump),
        None => {
            g.functions.lock().expect("functions").clear();
            changed(g);
            Ok(())
        }
    };
    if let Err(e) = result {
        tracing::error!("the consensus group's function libraries do not load here: {e}");
    }
}

/// Writes the registry to `functions.rdb` (a temporary file, synced, renamed over it).
fn save(g: &Globals) -> std::io::Result<()> {
    let Some(store) = g.store.get() else {
        return Ok(());
    };
    let path = store.path.join(FILE);
    let tmp = store.path.join(format!("{FILE}.tmp"));
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&dump(g))?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(&store.path)?.sync_all()
}

/// Loads `functions.rdb` at start, when there is one, and publishes the registry for the
/// replicas. A damaged file stops the start, as a damaged journal does.
pub fn load_saved(g: &Globals) -> Result<usize, String> {
    let count = read_saved(g)?;
    g.replication.set_functions(Bytes::from(dump(g)));
    Ok(count)
}

fn read_saved(g: &Globals) -> Result<usize, String> {
    let Some(store) = g.store.get() else {
        return Ok(0);
    };
    let path = store.path.join(FILE);
    let payload = match std::fs::read(&path) {
        Ok(payload) => payload,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let libraries = parse_dump(g, &payload, false).map_err(|err| match err {
        Frame::Error(text) => format!("{}: {}", path.display(), String::from_utf8_lossy(&text)),
        other => format!("{}: {other:?}", path.display()),
    })?;
    let mut registry = g.functions.lock().expect("functions");
    let count = libraries.len();
    for l in libraries {
        registry
            .add(l, true)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(count)
}
