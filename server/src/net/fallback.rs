//! The glommio TcpStream path (`--io glommio`): readiness-based, a `recv` and a `send`
//! syscall per request. Kept as the measured baseline for the io_uring ring and as a fallback
//! for kernels without multishot recv or provided-buffer rings.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use wetask_protocol::Output;

use crate::session::{self, Pump, Session, OUTPUT_BUFFER_BYTES_MAX};
use crate::shard::ShardCtx;

const READ_BYTES: usize = 16 * 1024;

pub async fn run(ctx: Rc<ShardCtx>, listener: OwnedFd) {
    // SAFETY: the listener fd is ours and handed over whole.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    if let Some(mesh) = &ctx.mesh {
        glommio::spawn_local(mesh.clone().run_flusher()).detach();
    }
    glommio::spawn_local(ctx.clone().serve_lock_queue()).detach();
    loop {
        // One accept future lives until it yields a connection; the timer around it only
        // lets the loop look at the shutdown flag. Dropping an accept whose io_uring
        // operation had already completed would lose that connection: its client would wait
        // for ever (seen under CPU contention).
        let mut accept = Box::pin(listener.accept());
        let accepted = loop {
            if ctx.globals.shutting_down() {
                return;
            }
            let polled = futures_lite::future::or(async { Some((&mut accept).await) }, async {
                glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
                None
            })
            .await;
            if let Some(result) = polled {
                break result;
            }
        };
        match accepted {
            Ok(stream) => {
                if !ctx.globals.admit_client() {
                    let mut stream = stream;
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                    continue;
                }
                let ctx = ctx.clone();
                glommio::spawn_local(async move { serve(ctx, stream).await }).detach();
            }
            Err(err) => tracing::warn!("accept failed: {err}"),
        }
    }
}

/// Writes queued replies, referenced payloads included, in order.
/// What the shard journaled goes to its journal first (replies never overtake their writes).
async fn write_output(ctx: &ShardCtx, stream: &mut TcpStream, out: &Output) -> std::io::Result<()> {
    ctx.commit_journal(crate::persist::Commit::Now);
    let mut pieces: Vec<&[u8]> = Vec::new();
    out.for_each_slice(0, |piece| {
        pieces.push(piece);
        true
    });
    for piece in pieces {
        stream.write_all(piece).await?;
    }
    Ok(())
}

/// Runs a batch (which may block: BLPOP, TASK.FETCH … BLOCK) while still reading the
/// connection, as the io_uring path does: what arrives is buffered for after the batch, and
/// end-of-file lets go of the client's blocked commands at once (`connection_closing`), so a
/// client that hangs up while blocked is never handed an element or a task it will not
/// read. Returns the batch's replies and whether the client hung up.
async fn run_while_reading(
    ctx: &Rc<ShardCtx>,
    state: &Rc<std::cell::RefCell<crate::clients::ConnState>>,
    run: impl std::future::Future<Output = Output>,
    stream: &mut TcpStream,
    buf: &mut [u8],
    session: &mut Session,
) -> (Output, bool) {
    enum Step {
        Done(Output),
        Read(std::io::Result<usize>),
    }
    let mut run = Box::pin(run);
    loop {
        let step = futures_lite::future::or(async { Step::Done((&mut run).await) }, async {
            Step::Read(stream.read(buf).await)
        })
        .await;
        match step {
            Step::Done(out) => return (after_early(state, out), false),
            Step::Read(Ok(n)) if n > 0 => {
                session.input.extend_from_slice(&buf[..n]);
                if session.input_overflowed() {
                    ctx.connection_closing(&state.borrow());
                    return (after_early(state, run.await), true);
                }
            }
            Step::Read(_) => {
                ctx.connection_closing(&state.borrow());
                return (after_early(state, run.await), true);
            }
        }
    }
}

/// A batch's replies behind what it sent early (`dispatch::send_early`), which this fallback
/// sends when the batch ends, not while a command blocks.
fn after_early(state: &std::cell::RefCell<crate::clients::ConnState>, out: Output) -> Output {
    let mut all = std::mem::take(&mut state.borrow_mut().pushes);
    all.append(out);
    all
}

async fn serve(ctx: Rc<ShardCtx>, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let state = super::new_connection(&ctx, fd);
    let mut session = Session::new(state.clone(), ctx.globals.config.proto_max_bulk_len);
    let mut buf = vec![0u8; READ_BYTES];
    let mut out = Output::default();
    'conn: loop {
        // Published messages go out as they come, between commands.
        ctx.settle_deferred_pushes();
        let pushes = std::mem::take(&mut state.borrow_mut().pushes);
        if !pushes.is_empty() && write_output(&ctx, &mut stream, &pushes).await.is_err() {
            break;
        }
        if state.borrow().close_requested {
            break;
        }
        let read = futures_lite::future::or(async { Some(stream.read(&mut buf).await) }, async {
            crate::commands::pubsub::pushes_ready(&state).await;
            None
        })
        .await;
        let n = match read {
            None => continue,
            Some(Ok(0) | Err(_)) => break,
            Some(Ok(n)) => n,
        };
        ctx.tick();
        session.input.extend_from_slice(&buf[..n]);
        if session.input_overflowed() {
            break;
        }
        loop {
            match session.pump(&ctx, &mut out) {
                Pump::Idle => break,
                Pump::Parked => unreachable!("this transport never lets a command park directly"),
                Pump::Close => {
                    let _ = write_output(&ctx, &mut stream, &out).await;
                    break 'conn;
                }
                Pump::Batch(batch) => {
                    let run = session::run_batch(ctx.clone(), state.clone(), batch);
                    let (more, closed) =
                        run_while_reading(&ctx, &state, run, &mut stream, &mut buf, &mut session)
                            .await;
                    out.append(more);
                    if closed {
                        let _ = write_output(&ctx, &mut stream, &out).await;
                        break 'conn;
                    }
                }
            }
            if out.len() > OUTPUT_BUFFER_BYTES_MAX {
                break 'conn;
            }
        }
        if !out.is_empty() {
            if write_output(&ctx, &mut stream, &out).await.is_err() {
                break;
            }
            out.clear();
        }
        if state.borrow().close_requested {
            break;
        }
    }
    ctx.connection_closed(&state.borrow());
    ctx.globals.release_client();
}
