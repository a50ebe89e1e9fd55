//! The queues overview (`/`: every queue's counts, pause and resume, the last hour's depth
//! and throughput charts) and one queue (`/queue`: its tasks by state, paged, with requeue,
//! delete and cancel on each, and requeue or delete of every dead task at once).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

use bytes::Bytes;
use wetask_protocol::Frame;

use super::{field_int, get_many, task_actions, task_link, Fields, Page, View};
use crate::clock::unix_ms;
use crate::dashboard::history::WINDOW_MS;
use crate::dashboard::html::{action, age, chart, esc, esc_bytes, href, table, time};
use crate::loopback::{bytes, queue_names, queue_stats, text, LinkError};

/// Most queues the overview lists.
pub const QUEUES_SHOWN: usize = 1_000;
/// Tasks per page of a queue.
pub const PAGE_SIZE: usize = 25;
/// Lines per chart.
const CHART_LINES: usize = 8;

const STATES: &[&str] = &["queued", "scheduled", "leased", "dead", "done", "cancelled"];

const SEARCH: &str = "<form class=\"search\" method=\"get\" action=\"/task\" role=\"search\">\
    <label for=\"id\">Find a task by id</label> <input id=\"id\" name=\"id\" required> \
    <button type=\"submit\">Open</button></form>";

fn queue_link(name: &str) -> String {
    format!(
        "<a href=\"{}\">{}</a>",
        esc(&href("/queue", &[("name", name.as_bytes())])),
        esc(name)
    )
}

/// `/`: the queues and the charts.
pub fn overview(view: &mut View<'_>) -> Result<Page, LinkError> {
    let mut names = queue_names(view.link, usize::MAX)?;
    // Each shard lists its own in order; the page lists them all in order.
    names.sort();
    names.truncate(QUEUES_SHOWN);
    let stats = queue_stats(view.link, &names)?;
    let mut rows = Vec::new();
    let mut readable = HashSet::new();
    for (name, stats) in names.iter().zip(stats) {
        match stats {
            Ok(s) => {
                readable.insert(name.as_str());
                rows.push(overview_row(view, name, &s));
            }
            Err(_) => {
                let mut row = vec![
                    queue_link(name),
                    "<span class=\"muted\">not permitted</span>".into(),
                ];
                row.resize(10, String::new());
                rows.push(row);
            }
        }
    }
    let mut body = String::from(SEARCH);
    body.push_str(&charts(view, &readable));
    body.push_str(&table(
        &format!("Queues: {}", names.len()),
        &[
            "Queue",
            "State",
            "Queued",
            "Scheduled",
            "Leased",
            "Dead",
            "Acked",
            "Failed",
            "Oldest waiting",
            "",
        ],
        &rows,
    ));
    Ok(Page::ok("Queues", body))
}

fn overview_row(view: &View<'_>, name: &str, s: &BTreeMap<String, i64>) -> Vec<String> {
    let paused = s.get("paused").copied().unwrap_or(0) != 0;
    let state = if paused {
        "<span class=\"paused\">paused</span>".to_string()
    } else {
        "running".to_string()
    };
    let n = |f: &str| s.get(f).copied().unwrap_or(0).to_string();
    vec![
        queue_link(name),
        state,
        n("queued"),
        n("scheduled"),
        n("leased"),
        n("dead"),
        n("acked"),
        n("failed"),
        age(s.get("oldest_age_ms").copied().unwrap_or(0)),
        pause_form(view, name, paused, "/"),
    ]
}

/// The depth and throughput charts of the queues this user may read; they start at the
/// oldest sample, at most an hour ago.
fn charts(view: &View<'_>, readable: &HashSet<&str>) -> String {
    let history = view.history.lock().expect("history");
    let (depth, throughput) = history.series(CHART_LINES, &|q| readable.contains(q));
    let to = unix_ms();
    let from = history
        .oldest_ms()
        .unwrap_or(to)
        .max(to.saturating_sub(WINDOW_MS));
    format!(
        "<div class=\"charts\">{}{}</div>",
        chart(
            "Waiting tasks (queued and scheduled)",
            "waiting",
            &depth,
            from,
            to
        ),
        chart(
            "Throughput (acknowledged per minute)",
            "per min",
            &throughput,
            from,
            to
        )
    )
}

fn pause_form(view: &View<'_>, queue: &str, paused: bool, back: &str) -> String {
    let (op, label) = if paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    let fields: &[(&str, &[u8])] = &[("op", op.as_bytes()), ("queue", queue.as_bytes())];
    action(view.csrf, label, fields, back, false)
}

/// `/queue?name=…&state=…&cursor=…`: one queue's tasks in one state, a page at a time.
pub fn queue(view: &mut View<'_>) -> Result<Page, LinkError> {
    let name = view.param("name").unwrap_or_default();
    if name.is_empty() {
        return Ok(Page::error(
            400,
            "No queue named",
            "The link names no queue.",
        ));
    }
    let state = view
        .param("state")
        .filter(|s| STATES.contains(&s.as_str()))
        .unwrap_or_else(|| "queued".into());
    let cursor = view.param("cursor").unwrap_or_else(|| "0".into());
    let stats = match queue_stats(view.link, std::slice::from_ref(&name))?.remove(0) {
        Ok(stats) => stats,
        Err(refused) => return Ok(Page::error(403, "Not permitted", &refused)),
    };
    let mut body = String::from(SEARCH);
    body.push_str(&queue_header(view, &name, &state, &stats));
    let count = PAGE_SIZE.to_string();
    let listed = view
        .link
        .request(&["TASK.LIST", &name, &state, &cursor, "COUNT", &count])?;
    let (next, ids) = list_page(listed);
    if state == "dead" && !ids.is_empty() {
        let fields: &[(&str, &[u8])] = &[("queue", name.as_bytes())];
        let _ = write!(
            body,
            "<p>{}{}</p>",
            action(
                view.csrf,
                "Requeue every dead task",
                &[&[("op", &b"requeue-all"[..])], fields].concat(),
                view.here,
                false
            ),
            action(
                view.csrf,
                "Delete every dead task",
                &[&[("op", &b"delete-all"[..])], fields].concat(),
                view.here,
                true
            )
        );
    }
    let tasks = get_many(view.link, &ids)?;
    let rows: Vec<Vec<String>> = ids
        .iter()
        .zip(tasks)
        .map(|(id, task)| task_row(view, &state, id, task))
        .collect();
    body.push_str(&table(
        &format!("Tasks {state}: {} on this page", ids.len()),
        &[
            "Id",
            "Attempts",
            "Priority",
            when_heading(&state),
            "Last error",
            "",
        ],
        &rows,
    ));
    body.push_str(&pager(&name, &state, &cursor, &next));
    Ok(Page::ok(&format!("Queue {name}"), body))
}

/// Running or paused (with the button that flips it), and a tab per state with its count.
fn queue_header(view: &View<'_>, name: &str, state: &str, stats: &BTreeMap<String, i64>) -> String {
    let paused = stats.get("paused").copied().unwrap_or(0) != 0;
    let mut out = format!(
        "<div class=\"status\">{} {}</div><ul class=\"tabs\" aria-label=\"States\">",
        if paused {
            "<span class=\"paused\">Paused</span>: it leases nothing."
        } else {
            "Running."
        },
        pause_form(view, name, paused, view.here)
    );
    for s in STATES {
        let count = stats.get(*s).map_or(String::new(), |n| format!(" ({n})"));
        let current = if *s == state {
            " aria-current=\"page\""
        } else {
            ""
        };
        let link = href(
            "/queue",
            &[("name", name.as_bytes()), ("state", s.as_bytes())],
        );
        let _ = write!(
            out,
            "<li><a href=\"{}\"{current}>{s}{count}</a></li>",
            esc(&link)
        );
    }
    out.push_str("</ul>");
    out
}

/// TASK.LIST's reply: the next cursor (`0` at the end) and the ids.
fn list_page(reply: Frame) -> (String, Vec<Bytes>) {
    match reply {
        Frame::Array(mut parts) if parts.len() == 2 => {
            let ids = match parts.pop() {
                Some(Frame::Array(ids)) => ids.iter().filter_map(bytes).collect(),
                _ => Vec::new(),
            };
            (parts.pop().map(|c| text(&c)).unwrap_or_default(), ids)
        }
        _ => (String::from("0"), Vec::new()),
    }
}

fn when_heading(state: &str) -> &'static str {
    match state {
        "scheduled" => "Due (UTC)",
        "leased" => "Lease until (UTC)",
        "queued" => "Submitted (UTC)",
        _ => "Finished (UTC)",
    }
}

fn task_row(view: &View<'_>, state: &str, id: &[u8], task: Option<Fields>) -> Vec<String> {
    let Some(task) = task else {
        return vec![task_link(id), "<span class=\"muted\">gone</span>".into()];
    };
    let when = match state {
        "scheduled" => field_int(&task, "due"),
        "leased" => field_int(&task, "lease_until"),
        "queued" => field_int(&task, "submitted"),
        _ => field_int(&task, "finished"),
    };
    vec![
        task_link(id),
        field_int(&task, "attempts").unwrap_or(0).to_string(),
        field_int(&task, "priority").unwrap_or(0).to_string(),
        time(when),
        task.get("error")
            .map_or(String::new(), |e| esc_bytes(e, 200)),
        task_actions(view.csrf, state, id, view.here, view.here),
    ]
}

fn pager(name: &str, state: &str, cursor: &str, next: &str) -> String {
    let mut out = String::from("<p>");
    let (name, state) = (name.as_bytes(), state.as_bytes());
    if cursor != "0" {
        let first = href("/queue", &[("name", name), ("state", state)]);
        let _ = write!(out, "<a href=\"{}\">First page</a> ", esc(&first));
    }
    if next != "0" {
        let link = href(
            "/queue",
            &[
                ("name", name),
                ("state", state),
                ("cursor", next.as_bytes()),
            ],
        );
        let _ = write!(out, "<a href=\"{}\" rel=\"next\">Next page</a>", esc(&link));
    }
    out.push_str("</p>");
    out
}
