//! Redis's configuration parameters that WeTask accepts and reports but that change nothing
//! here: encoding thresholds (`hash-max-listpack-entries` …: each type has one encoding),
//! replication, cluster, TLS, RDB, threading, logging and process options. CONFIG GET
//! reports them and CONFIG SET stores them, checked as Redis checks them (immutable, yes/no,
//! an integer, a memory size, one of a list), aliases included (`hash-max-ziplist-entries`
//! is `hash-max-listpack-entries`), so that tools and client libraries that tune them carry
//! on. The parameters WeTask acts on are `commands::config_params`; the table of every
//! Redis parameter is `config_table`, generated from a redis-server. docs/COMPATIBILITY.md
//! lists which are which.

use std::collections::HashMap;
use std::sync::Mutex;

use super::config_table::{Kind, Param, PARAMS};

/// The values CONFIG SET gave inert parameters (the others read as their defaults), for the
/// whole process (every shard's CONFIG reads and writes the same).
pub static INERT: std::sync::LazyLock<InertConfig> = std::sync::LazyLock::new(InertConfig::default);

#[derive(Default)]
pub struct InertConfig {
    values: Mutex<HashMap<&'static str, String>>,
}

fn param(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name == name)
}

impl InertConfig {
    /// The inert parameters (those `live` does not name) matching `matches`, with their
    /// values.
    pub fn matching(
        &self,
        live: &dyn Fn(&str) -> bool,
        matches: &dyn Fn(&str) -> bool,
    ) -> Vec<(&'static str, String)> {
        let values = self.values.lock().expect("inert config");
        PARAMS
            .iter()
            .filter(|p| !live(p.name) && matches(p.name))
            .map(|p| {
                let value = values.get(p.name).cloned();
                (p.name, value.unwrap_or_else(|| p.default.to_string()))
            })
            .collect()
    }

    /// The value CONFIG SET gave `name`, if it did.
    pub fn get(&self, name: &str) -> Option<String> {
        self.values.lock().expect("inert config").get(name).cloned()
    }

    /// True when `name` is an inert parameter.
    pub fn knows(&self, name: &str) -> bool {
        param(name).is_some()
    }

    /// CONFIG SET of `name` when it is an inert parameter: `None` when it is not one,
    /// otherwise whether the value was taken (`Err`: Redis's reason).
    pub fn set(&self, name: &str, value: &str) -> Option<Result<(), String>> {
        let param = param(name)?;
        Some(checked(param, value).map(|value| {
            let mut values = self.values.lock().expect("inert config");
            for name in param.aliases.iter().copied().chain([param.name]) {
                values.insert(name, value.clone());
            }
        }))
    }
}

/// `value` as the parameter stores it, or Redis's reason for refusing it.
fn checked(param: &Param, value: &str) -> Result<String, String> {
    match param.kind {
        Kind::Immutable => Err("can't set immutable config".into()),
        Kind::Protected => Err("can't set protected config".into()),
        Kind::MemoryOrPercent => match value.strip_suffix('%') {
            Some(n) if n.parse::<u64>().is_ok() => Ok(value.to_string()),
            _ => checked_memory(value)
                .map_err(|_| "argument must be a memory or percent value".into()),
        },
        Kind::Percentiles => {
            let ok = value
                .split_whitespace()
                .all(|p| p.parse::<f64>().is_ok_and(|p| (0.0..=100.0).contains(&p)));
            match ok {
                true => Ok(value.split_whitespace().collect::<Vec<_>>().join(" ")),
                false => Err("Invalid latency-tracking-info-percentiles parameters".into()),
            }
        }
        Kind::OomScores => {
            let words: Vec<&str> = value.split_whitespace().collect();
            if words.len() != 3 {
                return Err("wrong number of arguments".into());
            }
            match words
                .iter()
                .all(|w| w.parse::<i64>().is_ok_and(|n| n.abs() <= 2000))
            {
                true => Ok(words.join(" ")),
                false => Err("Invalid oom-score-adj-values".into()),
            }
        }
        Kind::Bool => match value.to_ascii_lowercase().as_str() {
            word @ ("yes" | "no") => Ok(word.to_string()),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Kind::Int => value
            .parse::<i64>()
            .map(|n| n.to_string())
            .map_err(|_| "argument couldn't be parsed into an integer".into()),
        Kind::Memory => checked_memory(value),
        Kind::Enum(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(value))
            .map(|w| w.to_string())
            .ok_or_else(|| {
                format!(
                    "argument(s) must be one of the following: {}",
                    words.join(", ")
                )
            }),
        Kind::Text => Ok(value.to_string()),
    }
}

fn checked_memory(value: &str) -> Result<String, String> {
    match value.parse::<i64>() {
        Ok(n) => Ok(n.to_string()),
        Err(_) => crate::config::memory_size(value)
            .map(|n| n.to_string())
            .map_err(|_| "argument must be a memory value".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_as_redis_checks_them_and_aliases_follow() {
        let config = InertConfig::default();
        let live = |_: &str| false;
        let get = |name: &str| config.matching(&live, &|n| n == name).pop().map(|(_, v)| v);
        assert_eq!(get("hash-max-listpack-entries").as_deref(), Some("512"));
        assert_eq!(config.set("hash-max-ziplist-entries", "100"), Some(Ok(())));
        assert_eq!(get("hash-max-listpack-entries").as_deref(), Some("100"));
        assert_eq!(
            config.set("hash-max-ziplist-entries", "many"),
            Some(Err("argument couldn't be parsed into an integer".into()))
        );
        assert_eq!(config.set("activerehashing", "YES"), Some(Ok(())));
        assert_eq!(get("activerehashing").as_deref(), Some("yes"));
        assert!(matches!(
            config.set("activerehashing", "maybe"),
            Some(Err(_))
        ));
        assert_eq!(config.set("repl-backlog-size", "2mb"), Some(Ok(())));
        assert_eq!(get("repl-backlog-size").as_deref(), Some("2097152"));
        assert_eq!(config.set("loglevel", "WARNING"), Some(Ok(())));
        assert_eq!(get("loglevel").as_deref(), Some("warning"));
        assert!(config.set("loglevel", "loud").is_some_and(|r| r
            .unwrap_err()
            .starts_with("argument(s) must be one of the following: debug")));
        assert_eq!(
            config.set("daemonize", "yes"),
            Some(Err("can't set immutable config".into()))
        );
        assert_eq!(config.set("no-such-parameter", "1"), None);
        assert_eq!(
            config.set("dbfilename", "x.rdb"),
            Some(Err("can't set protected config".into()))
        );
        assert_eq!(config.set("maxmemory-clients", "10%"), Some(Ok(())));
        assert!(matches!(
            config.set("maxmemory-clients", "lots"),
            Some(Err(_))
        ));
        assert_eq!(
            config.set("latency-tracking-info-percentiles", "50  99.9"),
            Some(Ok(()))
        );
        assert_eq!(
            get("latency-tracking-info-percentiles").as_deref(),
            Some("50 99.9")
        );
        assert!(matches!(
            config.set("latency-tracking-info-percentiles", "101"),
            Some(Err(_))
        ));
        assert!(matches!(
            config.set("oom-score-adj-values", "0 200"),
            Some(Err(_))
        ));
        // A parameter WeTask acts on is never reported from here.
        assert!(config
            .matching(&|n| n == "maxmemory", &|n| n == "maxmemory")
            .is_empty());
    }
}
