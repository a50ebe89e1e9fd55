//! The dashboard's HTML pieces: escaping, links, the page frame (navigation, the logged-in
//! user, a flash message), tables, the forms that change things (each with its CSRF token),
//! and line charts drawn as inline SVG, so every page reads without JavaScript.

use std::fmt::Write;

/// Text for HTML (element content and quoted attributes).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Bytes for HTML: lossy UTF-8, escaped, cut at `max` bytes with a note of how much more.
pub fn esc_bytes(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        return esc(&String::from_utf8_lossy(bytes));
    }
    format!(
        "{}… ({} more bytes)",
        esc(&String::from_utf8_lossy(&bytes[..max])),
        bytes.len() - max
    )
}

/// A value for a URL's query.
pub fn enc(value: &[u8]) -> String {
    form_urlencoded::byte_serialize(value).collect()
}

/// A link to `path` with query pairs.
pub fn href(path: &str, query: &[(&str, &[u8])]) -> String {
    let mut out = path.to_string();
    for (i, (name, value)) in query.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(name);
        out.push('=');
        out.push_str(&enc(value));
    }
    out
}

/// Unix ms as `2026-12-06 23:40:01` (UTC); empty for none.
pub fn time(ms: Option<i64>) -> String {
    let Some(ms) = ms else {
        return String::new();
    };
    let secs = ms.div_euclid(1000);
    let (year, month, day) = wetask_shards::tasks::cron::civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// A duration in ms, short: `850 ms`, `12 s`, `4 min`, `3 h`, `2 d`.
pub fn age(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 120_000 => format!("{} s", ms / 1_000),
        ms if ms < 7_200_000 => format!("{} min", ms / 60_000),
        ms if ms < 172_800_000 => format!("{} h", ms / 3_600_000),
        ms => format!("{} d", ms / 86_400_000),
    }
}

/// What every page's frame shows besides its body.
pub struct Frame<'a> {
    pub title: &'a str,
    pub user: &'a str,
    pub csrf: &'a str,
    /// A message from the last action (`Err`: a refusal or failure).
    pub flash: Option<Result<String, String>>,
}

const NAV: &[(&str, &str)] = &[
    ("/", "Queues"),
    ("/workers", "Workers"),
    ("/cron", "Cron"),
    ("/batches", "Batches and flows"),
];

/// A whole page: head, navigation, the flash message, the body.
pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let _ = write!(
        out,
        "{}<body><header><nav aria-label=\"Main\"><a class=\"brand\" href=\"/\">WeTask</a><ul>",
        head(frame.title)
    );
    for (path, name) in NAV {
        let _ = write!(out, "<li><a href=\"{path}\">{name}</a></li>");
    }
    let _ = write!(
        out,
        "</ul></nav><form class=\"who\" method=\"post\" action=\"/logout\">\
         <span>Signed in as <strong>{}</strong></span>{}\
         <button type=\"submit\">Sign out</button></form></header><main><h1>{}</h1>",
        esc(frame.user),
        csrf_field(frame.csrf),
        esc(frame.title)
    );
    match &frame.flash {
        Some(Ok(text)) => {
            let _ = write!(
                out,
                "<p class=\"flash ok\" role=\"status\">{}</p>",
                esc(text)
            );
        }
        Some(Err(text)) => {
            let _ = write!(
                out,
                "<p class=\"flash err\" role=\"alert\">{}</p>",
                esc(text)
            );
        }
        None => {}
    }
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

/// The document's start, to `<body>`: the page's title and the stylesheet.
fn head(title: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · WeTask</title><link rel=\"stylesheet\" href=\"/style.css\"></head>",
        esc(title)
    )
}

/// The login page (no frame: nobody is signed in).
pub fn login_page(error: Option<&str>) -> String {
    let error = error.map_or(String::new(), |e| {
        format!("<p class=\"flash err\" role=\"alert\">{}</p>", esc(e))
    });
    format!(
        "{}<body class=\"login\"><main><h1>WeTask</h1>{error}\
         <form method=\"post\" action=\"/login\">\
         <label for=\"username\">User</label>\
         <input id=\"username\" name=\"username\" autocomplete=\"username\" value=\"default\" required>\
         <label for=\"password\">Password</label>\
         <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\">\
         <button type=\"submit\">Sign in</button></form>\
         <p class=\"hint\">Any ACL user (ACL SETUSER) signs in; what it may see and do is what \
         its rules allow over RESP.</p></main></body></html>",
        head("Sign in")
    )
}

pub fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    )
}

/// A one-button form that POSTs an action: `fields` are hidden inputs, `back` where the
/// browser goes afterwards; `danger` asks for the red style.
pub fn action(
    csrf: &str,
    label: &str,
    fields: &[(&str, &[u8])],
    back: &str,
    danger: bool,
) -> String {
    let mut out = String::from("<form class=\"inline\" method=\"post\" action=\"/action\">");
    out.push_str(&csrf_field(csrf));
    for (name, value) in fields {
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
            esc(&String::from_utf8_lossy(value))
        );
    }
    let _ = write!(
        out,
        "<input type=\"hidden\" name=\"back\" value=\"{}\"><button type=\"submit\"{}>{}</button></form>",
        esc(back),
        if danger { " class=\"danger\"" } else { "" },
        esc(label)
    );
    out
}

/// A table: a caption, the headings, and rows of cells already in HTML.
pub fn table(caption: &str, headings: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("<table><caption>{}</caption><thead><tr>", esc(caption));
    for heading in headings {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(heading));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(
            out,
            "<tr><td colspan=\"{}\" class=\"empty\">None.</td></tr>",
            headings.len()
        );
    }
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// Fields as a definition list: (name, value already in HTML).
pub fn fields(pairs: &[(&str, String)]) -> String {
    let mut out = String::from("<dl class=\"fields\">");
    for (name, value) in pairs {
        let _ = write!(out, "<dt>{}</dt><dd>{value}</dd>", esc(name));
    }
    out.push_str("</dl>");
    out
}

/// One line of a chart: a name and (unix ms, value) points, oldest first.
pub struct Series {
    pub name: String,
    pub points: Vec<(u64, f64)>,
}

const COLOURS: &[&str] = &[
    "#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#57606a",
];
const CHART_W: f64 = 720.0;
const CHART_H: f64 = 200.0;
const PAD_L: f64 = 48.0;
const PAD_B: f64 = 22.0;

/// A line chart of `series` from `from_ms` to `to_ms`, as inline SVG with a text summary
/// (the last value of each line) beside it for those who do not see the picture.
pub fn chart(title: &str, unit: &str, series: &[Series], from_ms: u64, to_ms: u64) -> String {
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0);
    let span = to_ms.saturating_sub(from_ms).max(1) as f64;
    let x = |ms: u64| PAD_L + (ms.saturating_sub(from_ms) as f64 / span) * (CHART_W - PAD_L - 4.0);
    let y = |v: f64| 6.0 + (1.0 - v / top) * (CHART_H - PAD_B - 6.0);
    let mut out = format!(
        "<figure class=\"chart\"><figcaption>{}</figcaption>\
         <svg viewBox=\"0 0 {CHART_W} {CHART_H}\" role=\"img\" aria-label=\"{}\">",
        esc(title),
        esc(title)
    );
    out.push_str(&axes(top, span));
    for (i, line) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = line
            .points
            .iter()
            .map(|&(at, v)| format!("{:.1},{:.1}", x(at), y(v)))
            .collect();
        if points.len() == 1 {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\"/>",
                x(line.points[0].0),
                y(line.points[0].1)
            );
        } else if !points.is_empty() {
            let _ = write!(
                out,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.8\" points=\"{}\"/>",
                points.join(" ")
            );
        }
    }
    out.push_str("</svg><ul class=\"legend\">");
    for (i, line) in series.iter().enumerate() {
        let last = line.points.last().map_or(0.0, |p| p.1);
        let _ = write!(
            out,
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{}: {} {}</li>",
            COLOURS[i % COLOURS.len()],
            esc(&line.name),
            short_number(last),
            esc(unit)
        );
    }
    if series.is_empty() {
        out.push_str("<li>No samples yet.</li>");
    }
    out.push_str("</ul></figure>");
    out
}

/// A chart's axes and their labels: the top value, zero, how long ago the left edge is.
fn axes(top: f64, span: f64) -> String {
    let mut out = String::new();
    let base = CHART_H - PAD_B;
    let _ = write!(
        out,
        "<line x1=\"{PAD_L}\" y1=\"{base}\" x2=\"{CHART_W}\" y2=\"{base}\" class=\"axis\"/>\
         <line x1=\"{PAD_L}\" y1=\"6\" x2=\"{PAD_L}\" y2=\"{base}\" class=\"axis\"/>\
         <text x=\"{}\" y=\"14\" class=\"tick\" text-anchor=\"end\">{}</text>\
         <text x=\"{}\" y=\"{base}\" class=\"tick\" text-anchor=\"end\">0</text>\
         <text x=\"{PAD_L}\" y=\"{}\" class=\"tick\">{} ago</text>\
         <text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"end\">now</text>",
        PAD_L - 4.0,
        short_number(top),
        PAD_L - 4.0,
        CHART_H - 4.0,
        age(span as i64),
        CHART_W - 4.0,
        CHART_H - 4.0,
    );
    out
}

fn short_number(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract() == 0.0 || v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The stylesheet, served at `/style.css`.
pub const STYLE: &str = include_str!("style.css");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_elements_and_attributes() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(esc_bytes(b"abcdef", 3), "abc… (3 more bytes)");
    }

    #[test]
    fn links_encode_their_values() {
        assert_eq!(
            href("/queue", &[("name", b"jobs:a b&c"), ("state", b"dead")]),
            "/queue?name=jobs%3Aa+b%26c&state=dead"
        );
    }

    #[test]
    fn times_read_as_utc() {
        assert_eq!(time(Some(0)), "1970-01-01 00:00:00");
        assert_eq!(time(Some(1_796_600_401_000)), "2026-12-06 23:40:01");
        assert_eq!(time(None), "");
        assert_eq!(age(61_000), "61 s");
        assert_eq!(age(3 * 3_600_000), "3 h");
    }

    #[test]
    fn a_chart_draws_each_series_and_names_its_last_value() {
        let series = vec![
            Series {
                name: "jobs".into(),
                points: vec![(0, 1.0), (30_000, 4.0), (60_000, 2.0)],
            },
            Series {
                name: "<mail>".into(),
                points: vec![(60_000, 7.0)],
            },
        ];
        let svg = chart("Depth", "tasks", &series, 0, 60_000);
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("jobs: 2 tasks"));
        assert!(svg.contains("&lt;mail&gt;: 7 tasks"));
        assert!(
            svg.contains(">7</text>"),
            "the top of the axis is the largest value"
        );
    }
}
