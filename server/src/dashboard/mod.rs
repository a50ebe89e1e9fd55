//! `--http-port`: the task dashboard, server-rendered HTML on a thread of its own
//! (`tiny_http` parses the HTTP; no scripts, every page is links and forms). Off by default.
//!
//! Signing in is an ACL login ([`sessions`]): each session keeps a loopback RESP connection
//! authenticated as its user, and every page ([`views`]) and action runs its commands there,
//! so the dashboard can do exactly what that user may do over RESP. The charts come from
//! [`history`], which samples the queues on a thread of its own. Requests are served one at
//! a time, each exchange with the server bounded by a deadline; a shard never waits on the
//! dashboard.

mod history;
mod html;
mod sessions;
mod views;

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Mutex};

use tiny_http::{Header, Method, Request, Response};
use wetask_protocol::Frame;

use crate::acl::user::same_hash;
use crate::globals::Globals;
use crate::loopback::LinkError;
use history::History;
use sessions::{token_in, Sessions, COOKIE};
use views::{Page, View};

/// A page's renderer.
type PageFn = fn(&mut View<'_>) -> Result<Page, LinkError>;

/// Largest form body accepted.
const BODY_MAX: u64 = 64 * 1024;

/// Starts the dashboard on `bind:port` and its history sampler; the address is logged.
pub fn spawn(globals: Arc<Globals>, bind: &str, port: u16) -> Result<(), String> {
    let server = tiny_http::Server::http((bind, port))
        .map_err(|e| format!("cannot serve the dashboard on {bind}:{port}: {e}"))?;
    if let Some(addr) = server.server_addr().to_ip() {
        tracing::info!("dashboard on http://{addr}/");
    }
    let history = Arc::new(Mutex::new(History::default()));
    history::spawn(globals.clone(), history.clone())?;
    std::thread::Builder::new()
        .name("dashboard".into())
        .spawn(move || {
            let mut state = State {
                globals,
                history,
                sessions: Sessions::default(),
            };
            for request in server.incoming_requests() {
                if state.globals.shutting_down() {
                    break;
                }
                state.serve(request);
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the dashboard thread: {e}"))
}

struct State {
    globals: Arc<Globals>,
    history: Arc<Mutex<History>>,
    sessions: Sessions,
}

/// What a request gets back.
enum Reply {
    Html(u16, String),
    /// 303 to a path, optionally setting the session cookie (`Some("")` clears it).
    Redirect(String, Option<String>),
    Css,
}

impl State {
    fn serve(&mut self, mut request: Request) {
        let reply = self.route(&mut request);
        let response = match reply {
            Reply::Html(status, body) => Response::from_string(body)
                .with_status_code(status)
                .with_header(header("Content-Type", "text/html; charset=utf-8")),
            Reply::Css => Response::from_string(html::STYLE)
                .with_header(header("Content-Type", "text/css; charset=utf-8")),
            Reply::Redirect(to, cookie) => {
                let mut response = Response::from_string("")
                    .with_status_code(303)
                    .with_header(header("Location", &to));
                if let Some(token) = cookie {
                    let max_age = if token.is_empty() { "; Max-Age=0" } else { "" };
                    response = response.with_header(header(
                        "Set-Cookie",
                        &format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{max_age}"),
                    ));
                }
                response
            }
        };
        let response = response
            .with_header(header("Cache-Control", "no-store"))
            .with_header(header("X-Frame-Options", "DENY"))
            .with_header(header("X-Content-Type-Options", "nosniff"))
            .with_header(header(
                "Content-Security-Policy",
                "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'",
            ));
        let _ = request.respond(response);
    }

    fn route(&mut self, request: &mut Request) -> Reply {
        let url = request.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let query = parse_form(query.as_bytes());
        let method = request.method().clone();
        match (&method, path) {
            (Method::Get, "/style.css") => return Reply::Css,
            (Method::Get, "/login") => return Reply::Html(200, html::login_page(None)),
            (Method::Post, "/login") => return self.sign_in(request),
            _ => {}
        }
        let token = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Cookie"))
            .and_then(|h| token_in(h.value.as_str()).map(str::to_string))
            .unwrap_or_default();
        if method == Method::Post {
            return self.post(request, path, &token);
        }
        let Some(session) = self.sessions.get(&token) else {
            return Reply::Redirect("/login".into(), None);
        };
        let page: PageFn = match path {
            "/" => views::queues::overview,
            "/queue" => views::queues::queue,
            "/task" => views::tasks::task,
            "/workers" => views::operations::workers,
            "/cron" => views::operations::cron,
            "/batches" => views::operations::batches,
            "/batch" => views::operations::batch,
            _ => |_| Ok(Page::error(404, "No such page", "There is no page here.")),
        };
        let mut view = View {
            link: &mut session.link,
            csrf: &session.csrf,
            query: &query,
            history: &self.history,
            here: &url,
        };
        // An error reply (a refusal, a bad argument in the link) is the page's answer, and
        // the session goes on. A broken link is in an unknown state (a deadline passed
        // mid-reply, the server closed it): the session ends, and the next request signs in
        // again.
        let (page, ended) = match page(&mut view) {
            Ok(page) => (page, false),
            Err(LinkError::Reply(text)) if text.starts_with("NOPERM") => {
                (Page::error(403, "Not permitted", &text), false)
            }
            Err(LinkError::Reply(text)) => (Page::error(400, "The server refused", &text), false),
            Err(LinkError::Broken(text)) => {
                (Page::error(503, "The server did not answer", &text), true)
            }
        };
        let frame = html::Frame {
            title: &page.title,
            user: &session.user,
            csrf: &session.csrf,
            flash: session.flash.take(),
        };
        let out = html::page(&frame, &page.body);
        if ended {
            self.sessions.sign_out(&token);
        }
        Reply::Html(page.status, out)
    }

    /// A form: sign out, or an action run with the session's connection (its outcome shown
    /// on the page the browser goes back to). Every form carries the session's CSRF token.
    fn post(&mut self, request: &mut Request, path: &str, token: &str) -> Reply {
        let Some(session) = self.sessions.get(token) else {
            return Reply::Redirect("/login".into(), None);
        };
        let form = match read_form(request) {
            Ok(form) => form,
            Err(status) => return Reply::Html(status, "request too large".into()),
        };
        let csrf = form.get("csrf").map_or("", String::as_str);
        if !same_hash(csrf, &session.csrf) {
            return Reply::Html(403, "the form's token is stale: reload the page".into());
        }
        match path {
            "/logout" => {
                self.sessions.sign_out(token);
                Reply::Redirect("/login".into(), Some(String::new()))
            }
            "/action" => {
                session.flash = Some(act(&mut session.link, &form));
                Reply::Redirect(safe_back(form.get("back")), None)
            }
            _ => Reply::Html(404, "not found".into()),
        }
    }

    fn sign_in(&mut self, request: &mut Request) -> Reply {
        let form = match read_form(request) {
            Ok(form) => form,
            Err(status) => return Reply::Html(status, "request too large".into()),
        };
        let user = form.get("username").map_or("", String::as_str);
        let password = form.get("password").map_or("", String::as_str);
        let addr = crate::loopback::own_address(&self.globals);
        match self.sessions.sign_in(addr, user, password) {
            Ok(token) => Reply::Redirect("/".into(), Some(token)),
            Err(err) => {
                tracing::info!(user, "dashboard sign-in refused");
                Reply::Html(401, html::login_page(Some(&err)))
            }
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

fn parse_form(body: &[u8]) -> BTreeMap<String, String> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn read_form(request: &mut Request) -> Result<BTreeMap<String, String>, u16> {
    if request.body_length().is_some_and(|n| n as u64 > BODY_MAX) {
        return Err(413);
    }
    let mut body = Vec::new();
    request
        .as_reader()
        .take(BODY_MAX + 1)
        .read_to_end(&mut body)
        .map_err(|_| 400u16)?;
    if body.len() as u64 > BODY_MAX {
        return Err(413);
    }
    Ok(parse_form(&body))
}

/// Where an action sends the browser back to: a path on this site, never elsewhere, in
/// printable ASCII (the pages' own links are percent-encoded), so it is a valid header.
fn safe_back(back: Option<&String>) -> String {
    match back {
        Some(b)
            if b.starts_with('/')
                && !b.starts_with("//")
                && !b.contains('\\')
                && b.bytes().all(|c| c.is_ascii_graphic()) =>
        {
            b.clone()
        }
        _ => "/".into(),
    }
}

/// Runs one action of a form with the session's connection; what to tell the user.
fn act(
    link: &mut crate::loopback::Link,
    form: &BTreeMap<String, String>,
) -> Result<String, String> {
    let get = |name: &str| form.get(name).map_or("", String::as_str);
    let (op, queue, id, worker) = (get("op"), get("queue"), get("id"), get("worker"));
    let command: Vec<&str> = match op {
        "pause" => vec!["TASK.PAUSE", queue],
        "resume" => vec!["TASK.RESUME", queue],
        "requeue" => vec!["TASK.REQUEUE", id],
        "requeue-all" => vec!["TASK.REQUEUE", queue],
        "delete" => vec!["TASK.DELETE", id],
        "delete-all" => vec!["TASK.PURGE", queue, "dead"],
        "cancel" => vec!["TASK.CANCEL", id],
        "quiet" => vec!["TASK.QUIET", worker],
        _ => return Err("Unknown action.".into()),
    };
    let reply = link
        .request(&command)
        .map_err(|err| format!("{} refused: {err}", command[0]))?;
    Ok(match op {
        "pause" => format!("Paused {queue}."),
        "resume" => format!("Resumed {queue}."),
        "requeue" => count(&reply, "requeued", id),
        "requeue-all" => count(&reply, "requeued", queue),
        "delete" => count(&reply, "deleted", id),
        "delete-all" => count(&reply, "deleted", queue),
        "cancel" => format!("Cancelled {id}."),
        _ => format!("Quieted worker {worker}."),
    })
}

fn count(reply: &Frame, what: &str, of: &str) -> String {
    let n = match reply {
        Frame::Integer(n) => *n,
        _ => 0,
    };
    let tasks = if n == 1 { "task" } else { "tasks" };
    format!("{n} {tasks} {what} ({of}).")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_go_back_only_to_this_site() {
        let back = |s: &str| safe_back(Some(&s.to_string()));
        assert_eq!(back("/queue?name=a"), "/queue?name=a");
        assert_eq!(back("//evil.example/"), "/");
        assert_eq!(back("https://evil.example/"), "/");
        assert_eq!(back("/\\evil.example"), "/");
        assert_eq!(
            back("/x\r\nSet-Cookie: a=b"),
            "/",
            "no header can be smuggled in"
        );
        assert_eq!(back("/queue?name=\u{65e5}"), "/");
        assert_eq!(safe_back(None), "/");
    }

    #[test]
    fn forms_decode_plus_and_percent() {
        let form = parse_form(b"name=jobs%3Aa+b&state=dead");
        assert_eq!(form["name"], "jobs:a b");
        assert_eq!(form["state"], "dead");
    }
}
