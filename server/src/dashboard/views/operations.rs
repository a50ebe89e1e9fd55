//! The pages about what runs the queues: workers and the tasks they hold, with QUIET
//! (`/workers`); cron schedules (`/cron`); batches and flows with their state (`/batches`,
//! and one at `/batch?id=…`).

use std::collections::BTreeMap;
use std::fmt::Write;

use bytes::Bytes;
use wetask_protocol::Frame;

use super::{field_int, fields_of, found, get_many, task_link, Fields, Page, View};
use crate::dashboard::html::{action, age, esc, esc_bytes, fields, href, table, time};
use crate::loopback::{bytes, queue_names, LinkError};

/// Most queues whose leased tasks `/workers` lists, and leased tasks per queue.
const HELD_QUEUES_MAX: usize = 100;
const HELD_PER_QUEUE: usize = 100;
/// Batches and flows `/batches` lists per shard.
const BATCHES_SHOWN: usize = 50;

fn maps(frame: Frame) -> Vec<Fields> {
    match frame {
        Frame::Array(items) => items.into_iter().map(fields_of).collect(),
        _ => Vec::new(),
    }
}

fn s(fields: &Fields, name: &str) -> String {
    fields
        .get(name)
        .map_or(String::new(), |b| esc(&String::from_utf8_lossy(b)))
}

/// `/workers`: TASK.WORKERS, and the leased tasks by holder.
// Long: two tables, the second gathered queue by queue.
pub fn workers(view: &mut View<'_>) -> Result<Page, LinkError> {
    let workers = maps(view.link.request(&["TASK.WORKERS"])?);
    let now = crate::clock::unix_ms() as i64;
    let mut names: BTreeMap<Bytes, String> = BTreeMap::new();
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            let name = w.get("name").cloned().unwrap_or_default();
            if let Some(owner) = w.get("owner") {
                names.insert(owner.clone(), String::from_utf8_lossy(&name).into_owned());
            }
            let quiet = field_int(w, "quiet").unwrap_or(0) != 0;
            let button = if quiet {
                String::new()
            } else {
                action(
                    view.csrf,
                    "Quiet",
                    &[("op", b"quiet"), ("worker", &name)],
                    "/workers",
                    false,
                )
            };
            vec![
                esc_bytes(&name, 200),
                s(w, "status"),
                s(w, "connections"),
                s(w, "leases"),
                if quiet { "yes".into() } else { "no".into() },
                field_int(w, "heartbeat").map_or("none".into(), |ms| format!("{ms} ms")),
                field_int(w, "last_seen")
                    .map_or(String::new(), |ms| format!("{} ago", age(now - ms))),
                button,
            ]
        })
        .collect();
    let mut body = table(
        &format!("Workers: {}", workers.len()),
        &[
            "Worker",
            "Status",
            "Connections",
            "Leases",
            "Quiet",
            "Heartbeat",
            "Last seen",
            "",
        ],
        &rows,
    );
    body.push_str(
        "<p class=\"hint\">Quiet stops a worker's fetches (to drain it before a deploy); \
         the tasks it holds run on to their end.</p>",
    );
    let queues = queue_names(view.link, HELD_QUEUES_MAX)?;
    let count = HELD_PER_QUEUE.to_string();
    let lists: Vec<Vec<&str>> = queues
        .iter()
        .map(|q| vec!["TASK.LIST", q, "leased", "0", "COUNT", &count])
        .collect();
    view.link.send(&lists)?;
    let mut ids: Vec<Bytes> = Vec::new();
    for _ in &queues {
        if let Frame::Array(mut parts) = view.link.reply()? {
            if let Some(Frame::Array(page)) = parts.pop() {
                ids.extend(page.iter().filter_map(bytes));
            }
        }
    }
    let tasks = get_many(view.link, &ids)?;
    let mut held: Vec<Vec<String>> = ids
        .iter()
        .zip(tasks)
        .filter_map(|(id, task)| {
            let task = task?;
            let holder = task.get("leased_by")?.clone();
            let who = match names.get(&holder) {
                Some(name) => format!("worker {}", esc(name)),
                None => esc(&String::from_utf8_lossy(&holder).replace("client:", "connection ")),
            };
            Some(vec![
                who,
                task_link(id),
                s(&task, "queue"),
                s(&task, "attempts"),
                time(field_int(&task, "lease_until")),
            ])
        })
        .collect();
    held.sort();
    body.push_str(&table(
        "Tasks held",
        &["Held by", "Task", "Queue", "Attempt", "Lease until (UTC)"],
        &held,
    ));
    Ok(Page::ok("Workers", body))
}

/// `/cron`: TASK.CRON LIST.
pub fn cron(view: &mut View<'_>) -> Result<Page, LinkError> {
    let schedules = maps(view.link.request(&["TASK.CRON", "LIST"])?);
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|c| {
            let queue = c.get("queue").cloned().unwrap_or_default();
            vec![
                s(c, "name"),
                format!("<code>{}</code>", s(c, "schedule")),
                format!(
                    "<a href=\"{}\">{}</a>",
                    esc(&href("/queue", &[("name", &queue)])),
                    esc_bytes(&queue, 200)
                ),
                c.get("payload").map_or(String::new(), |p| {
                    format!("<code>{}</code>", esc_bytes(p, 120))
                }),
                time(field_int(c, "next")),
                time(field_int(c, "last")),
                s(c, "fired"),
                s(c, "skipped"),
            ]
        })
        .collect();
    let body = table(
        &format!("Schedules: {}", schedules.len()),
        &[
            "Name",
            "Schedule",
            "Queue",
            "Payload",
            "Next (UTC)",
            "Last (UTC)",
            "Fired",
            "Skipped",
        ],
        &rows,
    );
    Ok(Page::ok("Cron schedules", body))
}

/// `/batches`: the newest batches and flows.
pub fn batches(view: &mut View<'_>) -> Result<Page, LinkError> {
    let count = BATCHES_SHOWN.to_string();
    let mut batches = maps(view.link.request(&["TASK.BATCHES", "COUNT", &count])?);
    batches.sort_by_key(|b| std::cmp::Reverse(field_int(b, "created").unwrap_or(0)));
    let rows: Vec<Vec<String>> = batches
        .iter()
        .map(|b| {
            let id = b.get("id").cloned().unwrap_or_default();
            vec![
                format!(
                    "<a href=\"{}\"><code>{}</code></a>",
                    esc(&href("/batch", &[("id", &id)])),
                    esc_bytes(&id, 120)
                ),
                s(b, "kind"),
                batch_state(b),
                s(b, "total"),
                s(b, "ended"),
                s(b, "succeeded"),
                s(b, "failed"),
                time(field_int(b, "created")),
            ]
        })
        .collect();
    let mut body = String::from(
        "<form class=\"search\" method=\"get\" action=\"/batch\" role=\"search\">\
         <label for=\"id\">Find a batch or flow by id</label> <input id=\"id\" name=\"id\" required> \
         <button type=\"submit\">Open</button></form>",
    );
    body.push_str(&table(
        &format!("The newest batches and flows: {}", batches.len()),
        &[
            "Id",
            "Kind",
            "State",
            "Children",
            "Ended",
            "Succeeded",
            "Failed",
            "Created (UTC)",
        ],
        &rows,
    ));
    Ok(Page::ok("Batches and flows", body))
}

fn batch_state(b: &Fields) -> String {
    match field_int(b, "fired") {
        Some(ms) => format!("complete at {}", time(Some(ms))),
        None => "running".into(),
    }
}

/// `/batch?id=…`: one batch's counts and callbacks; a flow's children with their ends.
pub fn batch(view: &mut View<'_>) -> Result<Page, LinkError> {
    let id = view.param("id").unwrap_or_default();
    let reply = view.link.request(&["TASK.BATCHINFO", id.as_str()]);
    let missing = format!("There is no batch or flow with id {id}.");
    let info = match found(reply, ("No such batch", &missing))? {
        Ok(info) => info,
        Err(page) => return Ok(page),
    };
    let callback = |name: &str| {
        info.get(name)
            .map_or("none".to_string(), |id| task_link(id))
    };
    let mut body = fields(&[
        ("Id", format!("<code>{}</code>", esc(&id))),
        ("State", batch_state(&info)),
        ("Children", s(&info, "total")),
        ("Ended", s(&info, "ended")),
        ("Succeeded", s(&info, "succeeded")),
        ("Failed", s(&info, "failed")),
        ("On success", callback("on_success")),
        ("On complete (a flow's parent)", callback("on_complete")),
    ]);
    let mut title = format!("Batch {id}");
    if let Ok(Frame::Array(children)) = view.link.request(&["TASK.RESULTS", id.as_str()]) {
        title = format!("Flow {id}");
        let rows: Vec<Vec<String>> = children
            .into_iter()
            .filter_map(|child| match child {
                Frame::Array(parts) if parts.len() == 3 => Some(parts),
                _ => None,
            })
            .map(|parts| {
                let child = bytes(&parts[0]).unwrap_or_default();
                let end = bytes(&parts[1]).map_or("running".into(), |e| esc_bytes(&e, 20));
                let outcome = bytes(&parts[2]).map_or(String::new(), |o| {
                    format!("<code>{}</code>", esc_bytes(&o, 200))
                });
                vec![task_link(&child), end, outcome]
            })
            .collect();
        let _ = write!(
            body,
            "{}",
            table(
                "The flow's children",
                &["Child", "End", "Result or error"],
                &rows
            )
        );
    }
    Ok(Page::ok(&title, body))
}
