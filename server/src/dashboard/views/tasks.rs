//! One task (`/task?id=…`): its fields, payload, result, last error, progress and log lines,
//! and what may be done to it in its state (requeue and delete when dead, cancel while it
//! waits, delete when it ended).

use std::fmt::Write;

use wetask_protocol::Frame;

use super::{field_int, found, task_actions, Page, View};
use crate::dashboard::html::{esc, esc_bytes, fields, href, time};
use crate::loopback::{bytes, LinkError};

/// Most bytes of a payload, result or error a page shows.
pub const SHOWN_BYTES: usize = 64 * 1024;
/// Most log lines a page shows (the newest).
pub const LOG_LINES_SHOWN: usize = 500;

/// `/task?id=…`
// Long: one list of fields, then a section for each part of the task that is there.
pub fn task(view: &mut View<'_>) -> Result<Page, LinkError> {
    let id = view.param("id").unwrap_or_default();
    if id.is_empty() {
        return Ok(Page::error(
            400,
            "No task named",
            "Give a task id to look up.",
        ));
    }
    let reply = view.link.request(&["TASK.GET", id.as_str()]);
    let missing = format!("There is no task with id {id} (or it was forgotten).");
    let task = match found(reply, ("No such task", &missing))? {
        Ok(task) => task,
        Err(page) => return Ok(page),
    };
    let text = |name: &str| {
        task.get(name)
            .map_or(String::new(), |b| esc(&String::from_utf8_lossy(b)))
    };
    let queue = task.get("queue").cloned().unwrap_or_default();
    let state = text("state");
    let here = view.here.to_string();
    let mut body = String::new();
    let after_delete = href("/queue", &[("name", &queue), ("state", state.as_bytes())]);
    let buttons = task_actions(view.csrf, &state, id.as_bytes(), &here, &after_delete);
    let _ = write!(body, "<p>{buttons}</p>");
    body.push_str(&fields(&[
        ("Id", format!("<code>{}</code>", esc(&id))),
        (
            "Queue",
            format!(
                "<a href=\"{}\">{}</a>",
                esc(&href("/queue", &[("name", &queue)])),
                esc_bytes(&queue, 1024)
            ),
        ),
        ("State", state.clone()),
        ("Attempts", text("attempts")),
        ("Retries allowed", text("retries")),
        ("Lost leases", text("lost_leases")),
        ("Priority", text("priority")),
        ("Submitted (UTC)", time(field_int(&task, "submitted"))),
        ("Due (UTC)", time(field_int(&task, "due"))),
        ("Lease until (UTC)", time(field_int(&task, "lease_until"))),
        ("Leased by", text("leased_by")),
        ("Finished (UTC)", time(field_int(&task, "finished"))),
        ("Progress", text("progress")),
    ]));
    for (heading, name) in [
        ("Payload", "payload"),
        ("Result", "result"),
        ("Last error", "error"),
    ] {
        if let Some(value) = task.get(name) {
            let _ = write!(
                body,
                "<h2>{heading}</h2><pre>{}</pre>",
                esc_bytes(value, SHOWN_BYTES)
            );
        }
    }
    let logs: Vec<_> = match view.link.request(&["TASK.LOGS", id.as_str()]) {
        Ok(Frame::Array(lines)) => lines.iter().filter_map(bytes).collect(),
        _ => Vec::new(),
    };
    let _ = write!(body, "<h2>Log ({} lines)</h2>", logs.len());
    if logs.is_empty() {
        body.push_str("<p class=\"muted\">No log lines.</p>");
    } else {
        body.push_str("<ol class=\"log\">");
        for line in logs.iter().skip(logs.len().saturating_sub(LOG_LINES_SHOWN)) {
            let _ = write!(body, "<li><code>{}</code></li>", esc_bytes(line, 4096));
        }
        body.push_str("</ol>");
    }
    Ok(Page::ok(&format!("Task {id}"), body))
}
