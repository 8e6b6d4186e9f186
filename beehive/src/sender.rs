//! [`Sender`]: the bus endpoint a delivered message was sent through, as a 4-byte id.
//!
//! Endpoint names are interned once, when an endpoint is made, in a process-wide table that
//! only grows: a message carries the id (it fits in padding the header already has, so a
//! [`crate::Message`] stays the same size), and reading the name back is a shared read lock
//! and an index. Endpoints are made per module, not per message, so the table holds a few
//! dozen names.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{LazyLock, PoisonError, RwLock};

/// The names of every endpoint made in this process; id `n` is `names[n - 1]`.
#[derive(Default)]
struct Table {
    names: Vec<&'static str>,
    ids: HashMap<&'static str, NonZeroU32>,
}

static TABLE: LazyLock<RwLock<Table>> = LazyLock::new(RwLock::default);

/// The bus endpoint that sent a message: the name of the [`Endpoint`](crate::Endpoint) the
/// message went through, written by the bus on every send (plain, group, sync and answer).
///
/// **Guarantee:** a message delivered by the bus carries the name of the endpoint it was sent
/// through, whatever its route, header or content say and whatever sender it carried before
/// (a message received and sent on carries the new sender). Nothing outside the bus can set
/// it. A module that holds only its own endpoint (and endpoints derived from it with
/// [`Endpoint::sub`](crate::Endpoint::sub), named `<its name>/<role>`) can therefore not
/// pass for another module; which module gets which endpoint is the composition's choice.
/// A message built or decoded in place, never sent on a bus, has no sender.
///
/// Not part of the message's wire form nor of its equality: two messages with the same
/// header, route and content are equal whoever sent them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sender(NonZeroU32);

impl Sender {
    /// The id of `name`, interned on first use.
    #[cfg_attr(not(feature = "bus"), allow(dead_code))]
    pub(crate) fn named(name: &str) -> Sender {
        if let Some(id) = TABLE
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .ids
            .get(name)
        {
            return Sender(*id);
        }
        let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = table.ids.get(name) {
            return Sender(*id);
        }
        let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
        table.names.push(name);
        let id = u32::try_from(table.names.len())
            .ok()
            .and_then(NonZeroU32::new)
            .unwrap_or_else(|| unreachable!("fewer than 2^32 endpoint names"));
        table.ids.insert(name, id);
        Sender(id)
    }

    /// The endpoint's name.
    pub fn name(self) -> &'static str {
        let table = TABLE.read().unwrap_or_else(PoisonError::into_inner);
        // Ids are made only by `named`, which pushed the name first.
        table.names[self.0.get() as usize - 1]
    }
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sender({:?})", self.name())
    }
}

impl fmt::Display for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<str> for Sender {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

impl PartialEq<&str> for Sender {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_interns_to_one_id_and_reads_back() {
        let a = Sender::named("sender-test-a");
        let b = Sender::named("sender-test-b");
        assert_eq!(a, Sender::named("sender-test-a"));
        assert_ne!(a, b);
        assert_eq!(a.name(), "sender-test-a");
        assert_eq!(b, "sender-test-b");
        assert_eq!(format!("{a:?}"), "Sender(\"sender-test-a\")");
    }
}
