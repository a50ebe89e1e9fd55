//! The dashboard's pages, one file per part: queues (the overview and one queue's tasks),
//! tasks (one task's detail), operations (workers, cron schedules, batches and flows). A
//! page reads what it shows with the signed-in user's own connection, so a refusal by the
//! ACL shows as "not permitted" where it applies, or as the page's error.

pub mod operations;
pub mod queues;
pub mod tasks;

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;
use wetask_protocol::Frame;

use super::history::History;
use crate::loopback::{bytes, pairs, Link, LinkError};

/// What a page is given.
pub struct View<'a> {
    pub link: &'a mut Link,
    pub csrf: &'a str,
    pub query: &'a BTreeMap<String, String>,
    pub history: &'a Mutex<History>,
    /// This page's path and query, where its forms come back to.
    pub here: &'a str,
}

impl View<'_> {
    pub fn param(&self, name: &str) -> Option<String> {
        self.query.get(name).cloned()
    }
}

/// A page's status, title and body (the frame goes around it).
pub struct Page {
    pub status: u16,
    pub title: String,
    pub body: String,
}

impl Page {
    pub fn ok(title: &str, body: String) -> Page {
        Page {
            status: 200,
            title: title.to_string(),
            body,
        }
    }

    pub fn error(status: u16, title: &str, text: &str) -> Page {
        Page {
            status,
            title: title.to_string(),
            body: format!(
                "<p>{}</p><p><a href=\"/\">Back to the queues</a></p>",
                super::html::esc(text)
            ),
        }
    }
}

/// A map reply's fields as bytes (nil fields left out).
pub type Fields = BTreeMap<String, Bytes>;

pub fn fields_of(frame: Frame) -> Fields {
    pairs(frame)
        .into_iter()
        .filter_map(|(name, value)| bytes(&value).map(|b| (name, b)))
        .collect()
}

pub fn field_int(fields: &Fields, name: &str) -> Option<i64> {
    fields
        .get(name)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
}

/// The fields a lookup (TASK.GET, TASK.BATCHINFO) answered, or the page that says there is
/// no such thing (`missing`: its title and text, 404) or that the user may not look (403).
pub fn found(
    reply: Result<Frame, LinkError>,
    missing: (&str, &str),
) -> Result<Result<Fields, Page>, LinkError> {
    Ok(match reply {
        Ok(Frame::Null) => Err(Page::error(404, missing.0, missing.1)),
        Ok(frame) => Ok(fields_of(frame)),
        Err(LinkError::Reply(refused)) => Err(Page::error(403, "Not permitted", &refused)),
        Err(broken) => return Err(broken),
    })
}

/// `TASK.GET` of each id, pipelined: its fields, or `None` for a task gone or refused.
pub fn get_many(link: &mut Link, ids: &[Bytes]) -> Result<Vec<Option<Fields>>, LinkError> {
    let commands: Vec<Vec<&[u8]>> = ids.iter().map(|id| vec![&b"TASK.GET"[..], id]).collect();
    link.send(&commands)?;
    let mut out = Vec::with_capacity(ids.len());
    for _ in ids {
        out.push(match link.reply()? {
            frame @ (Frame::Map(_) | Frame::Array(_)) => Some(fields_of(frame)),
            _ => None,
        });
    }
    Ok(out)
}

/// A link to a task's page, its id as code.
pub fn task_link(id: &[u8]) -> String {
    format!(
        "<a href=\"{}\"><code>{}</code></a>",
        super::html::esc(&super::html::href("/task", &[("id", id)])),
        super::html::esc_bytes(id, 80)
    )
}

/// The buttons for a task in `state`: requeue and delete when dead, cancel while it waits,
/// delete once it ended. `back`: where they return; `after_delete`: where a delete does.
pub fn task_actions(csrf: &str, state: &str, id: &[u8], back: &str, after_delete: &str) -> String {
    let button = |label: &str, op: &str, to: &str, danger: bool| {
        super::html::action(
            csrf,
            label,
            &[("op", op.as_bytes()), ("id", id)],
            to,
            danger,
        )
    };
    match state {
        "dead" => {
            button("Requeue", "requeue", back, false)
                + &button("Delete", "delete", after_delete, true)
        }
        "queued" | "scheduled" => button("Cancel", "cancel", back, true),
        "done" | "cancelled" => button("Delete", "delete", after_delete, true),
        _ => String::new(),
    }
}
