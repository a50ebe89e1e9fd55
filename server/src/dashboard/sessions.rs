//! Who is signed in to the dashboard. Signing in opens a loopback RESP connection and sends
//! `AUTH user password` on it; the session keeps that connection, and every page and action
//! of the session runs its commands there. So the ACL decides what a dashboard user may see
//! and do, exactly as over RESP, and a change of the user's rules (or ACL DELUSER, which
//! closes its connections) takes effect at once. The browser holds only a random token in
//! an HttpOnly, SameSite=Strict cookie; forms also carry the session's CSRF token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::loopback::Link;

/// A session unused this long is closed.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// Most sessions at once; past it, the least recently used is closed.
pub const SESSIONS_MAX: usize = 256;
/// Each exchange with the server must end within this.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// The session cookie's name.
pub const COOKIE: &str = "wetask_session";
/// Longest user name or password a sign-in form may carry.
pub const CREDENTIAL_MAX: usize = 4096;

pub struct Session {
    pub user: String,
    pub link: Link,
    pub csrf: String,
    /// The last action's outcome, shown once on the next page.
    pub flash: Option<Result<String, String>>,
    last_used: Instant,
}

#[derive(Default)]
pub struct Sessions {
    by_token: HashMap<String, Session>,
}

impl Sessions {
    /// Signs `user` in: a new connection that AUTH accepted. Returns the session's token,
    /// or the server's refusal.
    pub fn sign_in(
        &mut self,
        addr: SocketAddr,
        user: &str,
        password: &str,
    ) -> Result<String, String> {
        if user.is_empty() || user.len() > CREDENTIAL_MAX || password.len() > CREDENTIAL_MAX {
            return Err("WRONGPASS invalid username-password pair or user is disabled.".into());
        }
        let mut link = Link::connect(addr, DEADLINE)?;
        link.request(&["AUTH", user, password])?;
        // A name in CLIENT LIST, where the user may set one (its ACL may not allow it).
        let _ = link.request(&["CLIENT", "SETNAME", "wetask-dashboard"]);
        self.expire();
        if self.by_token.len() >= SESSIONS_MAX {
            if let Some(oldest) = self
                .by_token
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(t, _)| t.clone())
            {
                self.by_token.remove(&oldest);
            }
        }
        let token = crate::acl::random_hex(256);
        self.by_token.insert(
            token.clone(),
            Session {
                user: user.to_string(),
                link,
                csrf: crate::acl::random_hex(128),
                flash: None,
                last_used: Instant::now(),
            },
        );
        Ok(token)
    }

    /// The session of `token`, if it is live; marks it used.
    pub fn get(&mut self, token: &str) -> Option<&mut Session> {
        self.expire();
        let session = self.by_token.get_mut(token)?;
        session.last_used = Instant::now();
        session.link.set_deadline(DEADLINE);
        Some(session)
    }

    pub fn sign_out(&mut self, token: &str) {
        self.by_token.remove(token);
    }

    fn expire(&mut self) {
        self.by_token.retain(|_, s| s.last_used.elapsed() < IDLE);
    }
}

/// The session token in a `Cookie` header.
pub fn token_in(cookie_header: &str) -> Option<&str> {
    cookie_header
        .split(';')
        .filter_map(|part| part.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_among_other_cookies() {
        assert_eq!(token_in("a=1; wetask_session=abc; b=2"), Some("abc"));
        assert_eq!(token_in("wetask_sessionx=abc"), None);
        assert_eq!(token_in(""), None);
    }
}
