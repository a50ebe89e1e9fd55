//! The ACL file (`aclfile`): one `user <name> <rules…>` line per user, as `ACL LIST` writes
//! them. Loading checks every line before any takes effect, and reports each bad line with
//! its number, as Redis does; saving writes a new file, syncs it, and renames it over the
//! old one, so a crash leaves one or the other whole.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::user::{merge_selectors, split_args, valid_name, User};

/// The file's users (the default user as Redis makes it, if the file leaves it out).
pub fn load(path: &Path, all_channels: bool) -> Result<BTreeMap<Bytes, Arc<User>>, String> {
    let shown = path.display();
    let text = std::fs::read(path)
        .map_err(|err| format!("ERR Error loading ACLs, opening file '{shown}': {err}"))?;
    let mut users: BTreeMap<Bytes, Arc<User>> = BTreeMap::new();
    let mut errors = String::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let number = i + 1;
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let Some(words) = split_args(line) else {
            errors += &format!("{shown}:{number}: unbalanced quotes in acl line. ");
            continue;
        };
        if words.len() < 2 || words[0] != b"user" {
            errors += &format!(
                "{shown}:{number} should start with user keyword followed by the username. "
            );
            continue;
        }
        let name = Bytes::from(words[1].clone());
        if users.contains_key(&name) {
            errors += &format!(
                "WARNING: Duplicate user '{}' found on line {number}. ",
                String::from_utf8_lossy(&name)
            );
            continue;
        }
        match user_of_line(name, &words[2..], all_channels) {
            Ok(user) => {
                users.insert(user.name.clone(), Arc::new(user));
            }
            Err(error) => errors += &format!("{shown}:{number}{error}"),
        }
    }
    if !errors.is_empty() {
        return Err(format!(
            "ERR {errors}WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
        ));
    }
    users
        .entry(Bytes::from_static(b"default"))
        .or_insert_with(|| Arc::new(User::default_user()));
    Ok(users)
}

/// The user a line defines (after `user <name>`); `Err` is the report after the line's
/// number.
fn user_of_line(name: Bytes, words: &[Vec<u8>], all_channels: bool) -> Result<User, String> {
    if !valid_name(&name) {
        return Err(format!(
            ": username '{}' contains invalid characters. ",
            String::from_utf8_lossy(&name)
        ));
    }
    let rules: Vec<Bytes> = words.iter().cloned().map(Bytes::from).collect();
    let rules = merge_selectors(&rules)
        .map_err(|_| ": Unmatched parenthesis in selector definition.".to_string())?;
    let mut user = User::new(name, all_channels);
    for rule in &rules {
        user.apply(rule, all_channels).map_err(|err| match err {
            super::RuleError::UnknownCommand => format!(
                ": Error in applying operation '{}': {}. ",
                String::from_utf8_lossy(rule),
                err.text()
            ),
            _ => format!(": {}. ", err.text()),
        })?;
    }
    Ok(user)
}

/// Writes `lines` to `path`: a temporary file beside it, synced, renamed over it, and the
/// directory synced.
pub fn save(path: &Path, lines: &[Vec<u8>]) -> std::io::Result<()> {
    let mut text = Vec::new();
    for line in lines {
        text.extend_from_slice(line);
        text.push(b'\n');
    }
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_file_loads_back_to_the_same_users() {
        let dir = std::env::temp_dir().join(format!("wetask-acl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("users.acl");
        let mut worker = User::new(Bytes::from_static(b"worker"), false);
        for rule in ["on", ">pw", "~jobs:*", "+@task", "+@read", "(~x +get)"] {
            worker.apply(rule.as_bytes(), false).unwrap();
        }
        let describe = |u: &User| [b"user ".as_slice(), &u.name, b" ", &u.describe()].concat();
        let lines = vec![describe(&User::default_user()), describe(&worker)];
        save(&path, &lines).unwrap();
        let loaded = load(&path, false).unwrap();
        let again: Vec<Vec<u8>> = loaded.values().map(|u| describe(u)).collect();
        assert_eq!(again, lines);
        assert!(loaded[&b"worker"[..]].password_ok(b"pw"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_line_loads_nothing_and_says_where() {
        let dir = std::env::temp_dir().join(format!("wetask-acl-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("users.acl");
        std::fs::write(&path, "user a on +get\nuser b +nosuch\nnot a user\n").unwrap();
        let err = load(&path, false).unwrap_err();
        assert!(
            err.contains(":2: Error in applying operation '+nosuch'"),
            "{err}"
        );
        assert!(err.contains(":3 should start with user keyword"), "{err}");
        assert!(err.ends_with("no change to the previously active ACL rules was performed"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
