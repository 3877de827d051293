//! The `metrics` keys of one locker's acquisitions, built once per kind
//! of hold on first use.
//!
//! A key is a metric's name with its labels and their hash. Built for every
//! record, it cost about as much as the record itself (a label list
//! allocated and hashed eight times per lock+release, with or without a
//! recorder). Keys carry no recorder: every record still asks the recorder
//! installed at that moment, so installing one after a locker was made
//! loses nothing.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use metrics::{Key, Label, SharedString};

use super::names::{Extra, SERIES};
use crate::key::Namespace;
use crate::taking::Taking;

/// The kinds of hold, one table each (their `kind` label differs).
const KINDS: usize = 5;

/// One locker's key tables (shared by its clones).
#[derive(Clone, Debug, Default)]
pub(crate) struct MetricKeys {
    tables: Arc<[OnceLock<Arc<KeyTable>>; KINDS]>,
}

impl MetricKeys {
    /// The keys of `taking` acquisitions on `store` in `namespace`.
    pub(crate) fn table(
        &self,
        store: &'static str,
        namespace: &Namespace,
        taking: Taking,
    ) -> Arc<KeyTable> {
        let slot = &self.tables[taking.index()];
        Arc::clone(slot.get_or_init(|| Arc::new(KeyTable::new(store, namespace, taking))))
    }
}

/// The keys of one store, namespace and kind of hold.
#[derive(Debug)]
pub(crate) struct KeyTable {
    base: [Label; 3],
    keys: Vec<(&'static str, Extra, Key)>,
}

impl KeyTable {
    fn new(store: &'static str, namespace: &Namespace, taking: Taking) -> Self {
        let base = [
            Label::from_static_parts("store", store),
            Label::new("namespace", SharedString::from(namespace.shared())),
            Label::from_static_parts("kind", taking.label()),
        ];
        let mut table = Self {
            base,
            keys: Vec::with_capacity(SERIES.len()),
        };
        for &(name, extra) in SERIES {
            let key = table.build(name, extra);
            table.keys.push((name, extra, key));
        }
        table
    }

    /// The key of metric `name` with `extra`: the one built ahead, or (for
    /// a series missing from the list) a new one.
    pub(crate) fn key(&self, name: &'static str, extra: Extra) -> Cow<'_, Key> {
        match self.keys.iter().find(|(n, e, _)| *n == name && *e == extra) {
            Some((_, _, key)) => Cow::Borrowed(key),
            None => Cow::Owned(self.build(name, extra)),
        }
    }

    fn build(&self, name: &'static str, extra: Extra) -> Key {
        let mut labels = Vec::with_capacity(4);
        labels.extend(self.base.iter().cloned());
        if let Some((label, value)) = extra {
            labels.push(Label::from_static_parts(label, value));
        }
        Key::from_parts(name, labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_built_ahead_equals_one_built_for_the_record() {
        let namespace = Namespace::new("ns").unwrap();
        let keys = MetricKeys::default();
        let table = keys.table("mem", &namespace, Taking::Read);
        for &(name, extra) in SERIES {
            let Cow::Borrowed(key) = table.key(name, extra) else {
                panic!("{name} {extra:?} not built ahead");
            };
            assert_eq!(*key, table.build(name, extra));
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(
                labels[..3],
                [("store", "mem"), ("namespace", "ns"), ("kind", "read")]
            );
        }
        assert!(matches!(table.key("other", None), Cow::Owned(_)));
        // One table per kind, made once.
        let again = keys.table("mem", &namespace, Taking::Read);
        assert!(Arc::ptr_eq(&table, &again));
        let lock = keys.table("mem", &namespace, Taking::Lock);
        assert!(!Arc::ptr_eq(&table, &lock));
    }
}
