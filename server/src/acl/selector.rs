//! A selector: one set of permissions (commands, keys, channels), as Redis 7 has them. A
//! user holds a root selector and may hold more (`(~x* +get)`); a command runs if any one
//! selector allows all of it. The rules a selector was given are kept in order (Redis's
//! `command_rules`), so `ACL LIST` and `ACL SAVE` write back what was said.

use std::collections::BTreeMap;

use wetask_shards::glob::glob_match;

use super::commands::{self, index};

/// Why a rule was refused; the text is Redis's (`ACLSetUserStringError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    UnknownCommand,
    Syntax,
    KeysAfterAll,
    ChannelsAfterAll,
    NoSuchPassword,
    BadHash,
    FirstArgOfSubcommand,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeysAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelsAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// A key pattern and what it grants: `~p` both, `%R~p` reads, `%W~p` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: Vec<u8>,
    pub read: bool,
    pub write: bool,
}

impl KeyPattern {
    fn describe(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match (self.read, self.write) {
            (true, true) => b"~".as_slice(),
            (true, false) => b"%R~",
            _ => b"%W~",
        });
        out.extend_from_slice(&self.pattern);
    }
}

/// What a command needs of a key: reading, writing, or both (from its key flags).
#[derive(Clone, Copy, Debug, Default)]
pub struct Access {
    pub read: bool,
    pub write: bool,
}

#[derive(Clone, Debug)]
pub struct Selector {
    /// Every key (`~*`, `allkeys`): no pattern list.
    pub all_keys: bool,
    /// Every channel (`&*`, `allchannels`).
    pub all_channels: bool,
    /// Given `+@all` and nothing taken away since (the check's shortcut).
    pub all_commands: bool,
    /// Given `+@all` and not `-@all` since: the rules start from every command (Redis's
    /// reserved "future commands" bit), whatever was taken away after.
    from_all: bool,
    /// One bit per command number (`commands::index`).
    allowed: Vec<u64>,
    /// First arguments allowed of a command that is otherwise not (`+select|0`).
    first_args: BTreeMap<usize, Vec<String>>,
    pub patterns: Vec<KeyPattern>,
    pub channels: Vec<Vec<u8>>,
    /// The command rules as given, in order, without the ones later rules replaced.
    rules: String,
}

/// Redis refuses spaces and NUL bytes in patterns and names.
pub fn has_spaces(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b == b' ' || b == 0)
}

impl Selector {
    /// A selector that allows nothing; `all_channels` from `acl-pubsub-default`.
    pub fn new(all_channels: bool) -> Self {
        Selector {
            all_keys: false,
            all_channels,
            all_commands: false,
            from_all: false,
            allowed: vec![0; index().bits().div_ceil(64)],
            first_args: BTreeMap::new(),
            patterns: Vec::new(),
            channels: Vec::new(),
            rules: String::new(),
        }
    }

    /// Allows everything: the default user's root selector.
    pub fn everything() -> Self {
        let mut selector = Selector::new(true);
        for op in ["+@all", "~*", "&*"] {
            selector.apply(op.as_bytes()).expect("valid");
        }
        selector
    }

    /// Whether this selector allows every command, key and channel.
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, allow: bool) {
        if allow {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or denies a command, and every subcommand of a container.
    fn change(&mut self, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.remove(&id);
        for &sub in &index().entries[id].subcommands {
            self.set_bit(sub, allow);
        }
    }

    fn set_all(&mut self, allow: bool) {
        let fill = if allow { u64::MAX } else { 0 };
        self.allowed.iter_mut().for_each(|word| *word = fill);
        self.all_commands = allow;
        self.from_all = allow;
        self.rules.clear();
        self.first_args.clear();
    }

    /// Keeps `rule` (without its sign) as the last command rule: an earlier rule for the
    /// same command, or for a subcommand of it, is dropped.
    fn remember(&mut self, rule: &str, allow: bool) {
        let rule = rule.to_ascii_lowercase();
        let kept: Vec<&str> = self
            .rules
            .split(' ')
            .filter(|r| !r.is_empty())
            .filter(|existing| {
                let name = &existing[1..];
                !(name == rule
                    || name.len() > rule.len()
                        && name.starts_with(rule.as_str())
                        && name.as_bytes()[rule.len()] == b'|')
            })
            .collect();
        let mut rules = kept.join(" ");
        if !rules.is_empty() {
            rules.push(' ');
        }
        rules.push(if allow { '+' } else { '-' });
        rules.push_str(&rule);
        self.rules = rules;
    }

    /// Applies one rule (`ACLSetSelector`).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let word = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if word("allkeys") || word("~*") {
            self.all_keys = true;
            self.patterns.clear();
        } else if word("resetkeys") {
            self.all_keys = false;
            self.patterns.clear();
        } else if word("allchannels") || word("&*") {
            self.all_channels = true;
            self.channels.clear();
        } else if word("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if word("allcommands") || word("+@all") {
            self.set_all(true);
        } else if word("nocommands") || word("-@all") {
            self.set_all(false);
        } else if op.first().is_some_and(|&c| c == b'~' || c == b'%') {
            self.add_key_pattern(op)?;
        } else if op.first() == Some(&b'&') {
            if self.all_channels {
                return Err(RuleError::ChannelsAfterAll);
            }
            if has_spaces(&op[1..]) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c[..] == op[1..]) {
                self.channels.push(op[1..].to_vec());
            }
            self.all_channels = false;
        } else if op.len() >= 2 && (op[0] == b'+' || op[0] == b'-') && op[1] == b'@' {
            let name = std::str::from_utf8(&op[2..]).map_err(|_| RuleError::UnknownCommand)?;
            let bits = commands::category(name).ok_or(RuleError::UnknownCommand)?;
            let allow = op[0] == b'+';
            let rule = std::str::from_utf8(&op[1..]).expect("checked");
            self.remember(rule, allow);
            for (id, entry) in index().entries.iter().enumerate() {
                if entry.categories & bits != 0 {
                    self.change(id, allow);
                }
            }
        } else if op.first() == Some(&b'+') {
            self.allow_command(op)?;
        } else if op.first() == Some(&b'-') {
            let name = std::str::from_utf8(&op[1..]).map_err(|_| RuleError::UnknownCommand)?;
            let id = index().find(name).ok_or(RuleError::UnknownCommand)?;
            self.change(id, false);
            self.remember(index().entries[id].name, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::KeysAfterAll);
        }
        let (mut read, mut write) = (op[0] == b'~', op[0] == b'~');
        let mut at = 1;
        if op[0] == b'%' {
            loop {
                match op.get(at).map(u8::to_ascii_uppercase) {
                    Some(b'R') if !read => read = true,
                    Some(b'W') if !write => write = true,
                    Some(b'~') if read || write => {
                        at += 1;
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
                at += 1;
            }
        }
        let pattern = &op[at..];
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.patterns.iter_mut().find(|p| p.pattern == pattern) {
            Some(existing) => {
                existing.read |= read;
                existing.write |= write;
            }
            None => self.patterns.push(KeyPattern {
                pattern: pattern.to_vec(),
                read,
                write,
            }),
        }
        self.all_keys = false;
        Ok(())
    }

    /// `+command`, `+container|subcommand`, or `+command|first-arg`.
    fn allow_command(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let name = std::str::from_utf8(&op[1..]).map_err(|_| RuleError::UnknownCommand)?;
        let index = index();
        let Some((command, sub)) = name.rsplit_once('|') else {
            let id = index.find(name).ok_or(RuleError::UnknownCommand)?;
            self.change(id, true);
            self.remember(index.entries[id].name, true);
            return Ok(());
        };
        let id = index.find(command).ok_or(RuleError::UnknownCommand)?;
        if index.entries[id].parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if index.entries[id].subcommands.is_empty() {
            let allowed = self.first_args.entry(id).or_default();
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                allowed.push(sub.to_string());
            }
        } else {
            let sub_id = index.find(name).ok_or(RuleError::UnknownCommand)?;
            self.change(sub_id, true);
        }
        self.remember(name, true);
        Ok(())
    }

    /// The command rules, as `ACL GETUSER` shows them: `+@all` or `-@all`, then the rules.
    pub fn describe_commands(&self) -> String {
        let start = if self.from_all { "+@all" } else { "-@all" };
        if self.rules.is_empty() {
            start.to_string()
        } else {
            format!("{start} {}", self.rules)
        }
    }

    /// The key patterns as `ACL GETUSER` shows them.
    pub fn describe_keys(&self) -> Vec<u8> {
        if self.all_keys {
            return b"~*".to_vec();
        }
        let mut out = Vec::new();
        for (i, pattern) in self.patterns.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            pattern.describe(&mut out);
        }
        out
    }

    /// The channel patterns as `ACL GETUSER` shows them.
    pub fn describe_channels(&self) -> Vec<u8> {
        if self.all_channels {
            return b"&*".to_vec();
        }
        let mut out = Vec::new();
        for (i, channel) in self.channels.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.push(b'&');
            out.extend_from_slice(channel);
        }
        out
    }

    /// The whole selector as `ACL LIST` writes it: keys, channels, commands.
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.all_keys {
            out.extend_from_slice(b"~* ");
        } else {
            for pattern in &self.patterns {
                pattern.describe(&mut out);
                out.push(b' ');
            }
        }
        if self.all_channels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for channel in &self.channels {
                out.push(b'&');
                out.extend_from_slice(channel);
                out.push(b' ');
            }
        }
        out.extend_from_slice(self.describe_commands().as_bytes());
        out
    }

    /// Whether the command numbered `id` may run with these arguments (`subcommand`: the
    /// first argument after the container's name decides a first-arg rule at index 2).
    pub fn allows_command(&self, id: usize, args: &[bytes::Bytes], subcommand: bool) -> bool {
        if self.all_commands || self.bit(id) {
            return true;
        }
        let at = if subcommand { 2 } else { 1 };
        match (self.first_args.get(&id), args.get(at)) {
            (Some(allowed), Some(arg)) => allowed
                .iter()
                .any(|a| a.as_bytes().eq_ignore_ascii_case(arg)),
            _ => false,
        }
    }

    /// Whether every key may be accessed so: all keys, or a `*` pattern that grants it.
    pub fn allows_key_everywhere(&self, access: Access) -> bool {
        self.all_keys
            || self.patterns.iter().any(|p| {
                (p.read || !access.read) && (p.write || !access.write) && p.pattern == b"*"
            })
    }

    pub fn allows_key(&self, key: &[u8], access: Access) -> bool {
        self.all_keys
            || self.patterns.iter().any(|p| {
                (p.read || !access.read)
                    && (p.write || !access.write)
                    && glob_match(&p.pattern, key)
            })
    }

    /// A channel (PUBLISH, SUBSCRIBE) matches a pattern; a pattern (PSUBSCRIBE) must be
    /// one of the patterns, literally.
    pub fn allows_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| {
                if is_pattern {
                    p[..] == *channel
                } else {
                    glob_match(p, channel)
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn with(ops: &[&str]) -> Selector {
        let mut s = Selector::new(false);
        for op in ops {
            s.apply(op.as_bytes()).unwrap();
        }
        s
    }

    fn id(name: &str) -> usize {
        index().find(name).unwrap()
    }

    #[test]
    fn rules_are_kept_in_order_without_the_ones_replaced() {
        let s = with(&["+@read", "-get", "+set", "+get", "-config", "+config|get"]);
        assert_eq!(
            s.describe_commands(),
            "-@all +@read +set +get -config +config|get"
        );
        let s = with(&["+config|get", "+config|set", "-config"]);
        assert_eq!(s.describe_commands(), "-@all -config");
        assert_eq!(with(&["+GET", "+@all"]).describe_commands(), "+@all");
        assert_eq!(with(&["+@all", "-get"]).describe_commands(), "+@all -get");
    }

    #[test]
    fn a_container_rule_covers_its_subcommands() {
        let s = with(&["+config"]);
        assert!(s.allows_command(id("config|get"), &[], true));
        let s = with(&["+config|get"]);
        assert!(s.allows_command(id("config|get"), &[], true));
        assert!(!s.allows_command(id("config|set"), &[], true));
        let s = with(&["+@all", "-config|set"]);
        assert!(!s.all_commands);
        assert!(s.allows_command(id("config|get"), &[], true));
        assert!(!s.allows_command(id("config|set"), &[], true));
    }

    #[test]
    fn first_args_allow_one_form_of_a_command() {
        let s = with(&["+select|0"]);
        let args = |a: &[&str]| -> Vec<bytes::Bytes> {
            a.iter()
                .map(|s| bytes::Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        };
        assert!(s.allows_command(id("select"), &args(&["select", "0"]), false));
        assert!(!s.allows_command(id("select"), &args(&["select", "1"]), false));
        assert_eq!(
            Selector::new(false).apply(b"+config|get|x"),
            Err(RuleError::FirstArgOfSubcommand)
        );
        assert_eq!(
            Selector::new(false).apply(b"+select|"),
            Err(RuleError::Syntax)
        );
        assert_eq!(
            Selector::new(false).apply(b"+config|nosuch"),
            Err(RuleError::UnknownCommand)
        );
        assert_eq!(
            Selector::new(false).apply(b"-select|0"),
            Err(RuleError::UnknownCommand)
        );
    }

    #[test]
    fn key_patterns_grant_reads_writes_or_both() {
        let s = with(&["%R~r:*", "%W~w:*", "~rw:*", "%R~w:*"]);
        let read = Access {
            read: true,
            write: false,
        };
        let write = Access {
            read: false,
            write: true,
        };
        let both = Access {
            read: true,
            write: true,
        };
        assert!(s.allows_key(b"r:1", read) && !s.allows_key(b"r:1", write));
        assert!(s.allows_key(b"w:1", write) && s.allows_key(b"w:1", both));
        assert!(s.allows_key(b"rw:1", both) && !s.allows_key(b"x", read));
        assert_eq!(s.describe_keys(), b"%R~r:* ~w:* ~rw:*");
        assert_eq!(
            with(&["~*"]).apply(b"~a"),
            Err(RuleError::KeysAfterAll),
            "a pattern after allkeys"
        );
        assert_eq!(Selector::new(false).apply(b"%X~a"), Err(RuleError::Syntax));
        assert_eq!(Selector::new(false).apply(b"%RR~a"), Err(RuleError::Syntax));
    }

    #[test]
    fn a_pattern_subscription_needs_the_same_pattern() {
        let s = with(&["&news.*"]);
        assert!(s.allows_channel(b"news.today", false));
        assert!(!s.allows_channel(b"news.today", true));
        assert!(s.allows_channel(b"news.*", true));
        assert!(!s.allows_channel(b"sport", false));
    }

    proptest! {
        /// Replaying a selector's description gives the same permissions (what ACL SAVE
        /// and ACL LOAD rely on), whatever rules built it.
        #[test]
        fn a_description_replays_to_the_same_permissions(
            ops in proptest::collection::vec(0usize..14, 0..12)
        ) {
            const OPS: &[&str] = &[
                "+@read", "-@read", "+get", "-get", "+@all", "-@all", "+config|get",
                "-config", "+config", "+select|1", "+@task", "-@task-admin", "-set", "+@string",
            ];
            let s = with(&ops.iter().map(|&i| OPS[i]).collect::<Vec<_>>());
            let description = s.describe_commands();
            let replay = with(&description.split(' ').collect::<Vec<_>>());
            prop_assert_eq!(&replay.allowed, &s.allowed, "{}", description);
            prop_assert_eq!(replay.from_all, s.from_all);
            prop_assert_eq!(&replay.first_args, &s.first_args);
            prop_assert_eq!(replay.describe_commands(), description);
        }
    }
}
