//! Fencing tokens.

use std::fmt;

/// A number that is strictly greater than every token issued earlier for
/// the same key in the same store, including tokens of holders whose lease
/// expired.
///
/// Pass it along with every write made under the lock; a resource that
/// remembers the highest token it accepted and rejects lower ones stays
/// safe when a paused holder wakes up after its lease ran out. What
/// survives a store restart is documented per backend.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token value (backends use this).
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> Self {
        token.0
    }
}
