//! An ACL user: on or off, its passwords (SHA-256, as Redis stores them), and its
//! selectors (the root one first). `ACL SETUSER`'s rules change a copy, so a rule that fails
//! leaves the user as it was.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::selector::{has_spaces, Access, RuleError, Selector};

#[derive(Clone, Debug)]
pub struct User {
    pub name: Bytes,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (Some(true)), `skip-sanitize-payload` (Some(false)).
    pub sanitize_payload: Option<bool>,
    /// Lower-case hex SHA-256 of each password.
    pub passwords: Vec<String>,
    /// The root selector, then any others.
    pub selectors: Vec<Selector>,
    /// The root selector allows everything: the per-command check is skipped.
    pub unrestricted: bool,
}

/// Why a command was refused, and the argument that decided it (0 for the command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

impl Denied {
    fn rank(self) -> (u8, usize) {
        match self {
            Denied::Command => (1, 0),
            Denied::Key(at) => (2, at),
            Denied::Channel(at) => (4, at),
        }
    }
}

/// What a command touches, for the check: its number, whether it is a subcommand, whether
/// it needs no authentication (AUTH, HELLO), its keys and its channels.
pub struct Touches<'a> {
    pub id: usize,
    pub subcommand: bool,
    pub no_auth: bool,
    pub args: &'a [Bytes],
    pub keys: Vec<(usize, Access)>,
    /// (argument index, is a pattern).
    pub channels: Vec<(usize, bool)>,
}

pub fn hash_password(password: &[u8]) -> String {
    let digest = Sha256::digest(password);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
    }
    hex
}

fn valid_hash(hash: &[u8]) -> bool {
    hash.len() == 64
        && hash
            .iter()
            .all(|&b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hash a password rule names: hashed from the clear text after `clear` (`>`, `<`),
/// or given as hex (`#`, `!`).
fn hash_of(op: &[u8], clear: u8) -> Result<String, RuleError> {
    if op[0] == clear {
        Ok(hash_password(&op[1..]))
    } else if valid_hash(&op[1..]) {
        Ok(String::from_utf8(op[1..].to_vec()).expect("hex"))
    } else {
        Err(RuleError::BadHash)
    }
}

/// Compares two secrets (password hashes, the dashboard's tokens) in time that does not
/// depend on where they differ.
pub fn same_hash(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

impl User {
    /// A new user: off, no passwords, allowed nothing (Redis 7.2's `sanitize-payload`).
    pub fn new(name: Bytes, all_channels: bool) -> Self {
        User {
            name,
            enabled: false,
            nopass: false,
            sanitize_payload: Some(true),
            passwords: Vec::new(),
            selectors: vec![Selector::new(all_channels)],
            unrestricted: false,
        }
    }

    /// The default user: on, no password, allowed everything.
    pub fn default_user() -> Self {
        let mut user = User::new(Bytes::from_static(b"default"), true);
        user.selectors[0] = Selector::everything();
        user.enabled = true;
        user.nopass = true;
        user.unrestricted = true;
        user
    }

    /// Applies one rule (`ACLSetUser`); `all_channels` is `acl-pubsub-default`.
    pub fn apply(&mut self, op: &[u8], all_channels: bool) -> Result<(), RuleError> {
        let result = self.apply_rule(op, all_channels);
        self.unrestricted = self.selectors[0].unrestricted();
        result
    }

    fn apply_rule(&mut self, op: &[u8], all_channels: bool) -> Result<(), RuleError> {
        let word = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if op.is_empty() {
        } else if word("on") {
            self.enabled = true;
        } else if word("off") {
            self.enabled = false;
        } else if word("skip-sanitize-payload") {
            self.sanitize_payload = Some(false);
        } else if word("sanitize-payload") {
            self.sanitize_payload = Some(true);
        } else if word("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if word("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = hash_of(op, b'>')?;
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = hash_of(op, b'<')?;
            let at = self.passwords.iter().position(|p| *p == hash);
            self.passwords.remove(at.ok_or(RuleError::NoSuchPassword)?);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let mut selector = Selector::new(all_channels);
            for inner in split_args(&op[1..op.len() - 1]).ok_or(RuleError::Syntax)? {
                selector.apply(&inner)?;
            }
            self.selectors.push(selector);
        } else if word("clearselectors") {
            self.selectors.truncate(1);
        } else if word("reset") {
            for op in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply_rule(op.as_bytes(), all_channels)?;
            }
            if all_channels {
                self.apply_rule(b"allchannels", all_channels)?;
            }
            for op in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply_rule(op.as_bytes(), all_channels)?;
            }
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    /// Whether `password` opens this user (on, and no password needed or one matches).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hash = hash_password(password);
        // Every stored hash is compared, so the time does not tell which one matched.
        self.passwords
            .iter()
            .fold(false, |found, p| same_hash(p, &hash) | found)
    }

    /// Whether some selector allows this channel (or, `is_pattern`, this pattern).
    pub fn allows_channel(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.selectors
            .iter()
            .any(|s| s.allows_channel(channel, is_pattern))
    }

    /// The flags, as `ACL GETUSER` lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// The user's rules as `ACL LIST` and the ACL file write them (after `user <name> `).
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for flag in self.flags() {
            out.extend_from_slice(flag.as_bytes());
            out.push(b' ');
        }
        for password in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(password.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&self.selectors[0].describe());
        for selector in &self.selectors[1..] {
            out.extend_from_slice(b" (");
            out.extend_from_slice(&selector.describe());
            out.push(b')');
        }
        out
    }

    /// Whether the command may run: some selector must allow the command, its keys and its
    /// channels. When none does, the reason Redis reports: the channel or key that no
    /// selector allowed (the last one of the highest kind), else the command.
    pub fn check(&self, touches: &Touches<'_>) -> Result<(), Denied> {
        let mut worst = Denied::Command;
        for selector in &self.selectors {
            let verdict = check_selector(selector, touches);
            match verdict {
                Ok(()) => return Ok(()),
                Err(denied) if denied.rank() > worst.rank() => worst = denied,
                Err(_) => {}
            }
        }
        Err(worst)
    }
}

fn check_selector(selector: &Selector, touches: &Touches<'_>) -> Result<(), Denied> {
    if !touches.no_auth && !selector.allows_command(touches.id, touches.args, touches.subcommand) {
        return Err(Denied::Command);
    }
    for &(at, access) in &touches.keys {
        if !selector.allows_key(&touches.args[at], access) {
            return Err(Denied::Key(at));
        }
    }
    for &(at, is_pattern) in &touches.channels {
        if !selector.allows_channel(&touches.args[at], is_pattern) {
            return Err(Denied::Channel(at));
        }
    }
    Ok(())
}

/// Joins `ACL SETUSER`'s arguments that make up one selector (`(~x*` `+get)`) into one
/// rule; `Err` names the argument whose parenthesis is never closed.
pub fn merge_selectors(args: &[Bytes]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::with_capacity(args.len());
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, arg) in args.iter().enumerate() {
        if let Some((_, selector)) = open.as_mut() {
            selector.push(b' ');
            selector.extend_from_slice(arg);
            if arg.last() == Some(&b')') {
                out.push(open.take().expect("open").1);
            }
        } else if arg.first() == Some(&b'(') && arg.last() != Some(&b')') {
            open = Some((i, arg.to_vec()));
        } else {
            out.push(arg.to_vec());
        }
    }
    match open {
        Some((at, _)) => Err(at),
        None => Ok(out),
    }
}

/// Splits a line into words as Redis's `sdssplitargs` does; `None` for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let words = wetask_protocol::split_args(line).ok()?;
    Some(words.into_iter().map(|w| w.to_vec()).collect())
}

/// A user name must have no spaces or NUL bytes.
pub fn valid_name(name: &[u8]) -> bool {
    !has_spaces(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_hash("abcd", "abcd"));
        assert!(!same_hash("abcd", "abce"));
        assert!(!same_hash("abc", "abcd"));
    }

    fn user(ops: &[&str]) -> User {
        let mut u = User::new(Bytes::from_static(b"u"), false);
        for op in ops {
            u.apply(op.as_bytes(), false).unwrap();
        }
        u
    }

    #[test]
    fn passwords_are_stored_hashed_and_checked() {
        let u = user(&["on", ">secret"]);
        assert_eq!(u.passwords, vec![hash_password(b"secret")]);
        assert!(u.password_ok(b"secret") && !u.password_ok(b"other"));
        let off = user(&[">secret"]);
        assert!(!off.password_ok(b"secret"), "a user that is off");
        let mut u = u;
        assert_eq!(u.apply(b"<nope", false), Err(RuleError::NoSuchPassword));
        u.apply(b"<secret", false).unwrap();
        assert!(!u.password_ok(b"secret"));
        assert_eq!(u.apply(b"#ABC", false), Err(RuleError::BadHash));
        u.apply(b"nopass", false).unwrap();
        assert!(u.password_ok(b"anything"));
    }

    #[test]
    fn describe_is_what_acl_list_writes() {
        let u = user(&[
            "on",
            ">pw",
            "~jobs:*",
            "&ch*",
            "+@read",
            "-get",
            "(~x* +get)",
        ]);
        let text = String::from_utf8(u.describe()).unwrap();
        assert_eq!(
            text,
            format!(
                "on sanitize-payload #{} ~jobs:* resetchannels &ch* -@all +@read -get (~x* resetchannels -@all +get)",
                hash_password(b"pw")
            )
        );
        let default = String::from_utf8(User::default_user().describe()).unwrap();
        assert_eq!(default, "on nopass sanitize-payload ~* &* +@all");
    }

    #[test]
    fn reset_returns_a_user_to_its_state_at_creation() {
        let mut u = user(&["on", ">pw", "~*", "+@all", "(+get ~x)"]);
        u.apply(b"reset", false).unwrap();
        assert_eq!(
            String::from_utf8(u.describe()).unwrap(),
            "off sanitize-payload resetchannels -@all"
        );
    }

    #[test]
    fn selectors_merge_across_arguments_and_must_close() {
        let args: Vec<Bytes> = ["on", "(~x*", "+get)", "(+set ~y)", "+@read"]
            .iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect();
        let merged = merge_selectors(&args).unwrap();
        assert_eq!(merged[1], b"(~x* +get)");
        assert_eq!(merged.len(), 4);
        let open: Vec<Bytes> = vec![Bytes::from_static(b"(~x"), Bytes::from_static(b"+get")];
        assert_eq!(merge_selectors(&open), Err(0));
    }

    #[test]
    fn split_args_reads_quotes_as_redis_does() {
        let words = split_args(br#"user a "b c" 'd e' "\x41\n""#).unwrap();
        assert_eq!(
            words,
            vec![
                b"user".to_vec(),
                b"a".to_vec(),
                b"b c".to_vec(),
                b"d e".to_vec(),
                b"A\n".to_vec()
            ]
        );
        assert!(split_args(b"\"open").is_none());
        assert!(split_args(b"\"a\"b").is_none());
        assert_eq!(split_args(b"  ").unwrap().len(), 0);
    }
}
