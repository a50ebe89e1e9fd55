//! A command as a shard runs it ([`Call`]): its row, its arguments, where its keys are, and
//! what runs (its handler, or a form the server parsed once). The key positions come from
//! the server's one parse (`request::Request::known_keys`) when it made one; otherwise
//! (a fixed-key row, a replayed or internal command) from the row, where fixed positions
//! are arithmetic and only a movable-key row runs its key finder.

use bytes::Bytes;

use crate::request::{Form, KeyAt, Request};
use crate::spec::{CommandSpec, KeyPositions};

/// What runs a command on a shard: its row's handler (which parses the arguments), or a
/// form the server already parsed.
#[derive(Clone, Copy)]
pub(super) enum Body<'a> {
    Handler,
    Blocking(&'a crate::families::blocking::Blocking),
    Sort(&'a crate::families::sort::SortArgs),
}

impl<'a> Body<'a> {
    /// The body for a request's parsed form: the form where the shard side takes one, else
    /// the handler.
    pub(super) fn of(form: &'a Form) -> Body<'a> {
        match form {
            Form::Blocking(blocking) => Body::Blocking(blocking),
            Form::Sort(sort) => Body::Sort(sort),
            _ => Body::Handler,
        }
    }
}

/// One command on its way through `Shard::run`.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub spec: &'a CommandSpec,
    pub args: &'a [Bytes],
    /// The keys as the server's parse found them; `None`: the row gives them.
    pub keys: Option<&'a [KeyAt]>,
    pub body: Body<'a>,
}

impl<'a> Call<'a> {
    /// A command with no parse behind it: its row's handler, its row's key positions.
    pub(super) fn plain(spec: &'a CommandSpec, args: &'a [Bytes]) -> Call<'a> {
        Call {
            spec,
            args,
            keys: None,
            body: Body::Handler,
        }
    }

    /// A request the server parsed: its form and its keys, as parsed.
    pub(super) fn of(spec: &'a CommandSpec, request: &'a Request) -> Call<'a> {
        Call {
            spec,
            args: &request.args,
            keys: request.known_keys(),
            body: Body::of(request.form()),
        }
    }

    /// Each key's position among the arguments.
    pub(super) fn key_positions(&self) -> CallKeys<'a> {
        match self.keys {
            Some(keys) => CallKeys::Parsed(keys.iter()),
            None => CallKeys::Row(self.spec.key_positions(self.args)),
        }
    }

    /// Each key, as the arguments hold it.
    pub(super) fn keys(&self) -> impl Iterator<Item = &'a Bytes> + 'a {
        let args = self.args;
        self.key_positions().map(move |i| &args[i])
    }
}

/// A call's key positions: from the parse, or from the row.
pub(super) enum CallKeys<'a> {
    Parsed(std::slice::Iter<'a, KeyAt>),
    Row(KeyPositions),
}

impl Iterator for CallKeys<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        match self {
            CallKeys::Parsed(keys) => keys.next().map(|k| k.position as usize),
            CallKeys::Row(row) => row.next(),
        }
    }
}
