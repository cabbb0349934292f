//! Virtual time, typed ids, integer probabilities and the stable hash: the vocabulary every
//! component shares. Nothing here reads a clock or depends on the platform.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in virtual time, integer nanoseconds since the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct Instant(pub u64);

/// A span of virtual time in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct Duration(pub u64);

impl Duration {
    pub const fn from_ms(ms: u64) -> Duration {
        Duration(ms.saturating_mul(1_000_000))
    }
    pub const fn from_s(s: u64) -> Duration {
        Duration(s.saturating_mul(1_000_000_000))
    }
    pub const fn from_us(us: u64) -> Duration {
        Duration(us.saturating_mul(1_000))
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl Instant {
    pub fn since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 / 1_000_000;
        write!(f, "t={}.{:03}s", ms / 1000, ms % 1000)
    }
}

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident, $inner:ty) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub $inner);
        impl $name {
            pub fn idx(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A client request, numbered in arrival order from 0.
    RequestId,
    u32
);
id_type!(
    /// A tenant: the isolation boundary the oracle protects.
    TenantId,
    u32
);
id_type!(
    /// A page of a KV pool. Page 0 is reserved and never handed out.
    PageId,
    u32
);

/// Which side of the disaggregated deployment a node plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Prefill,
    Decode,
}

/// A prefill or decode node: role plus index within the role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId {
    pub role: Role,
    pub index: u16,
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Role::Prefill => write!(f, "prefill-{}", self.index),
            Role::Decode => write!(f, "decode-{}", self.index),
        }
    }
}

impl NodeId {
    pub fn role_name(self) -> &'static str {
        match self.role {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }

    /// The node's typed index: match on it to index `World::prefill` or `World::decode` with the
    /// index of that role (`self.prefill[p.at()]`), never with a bare `u16`.
    pub fn idx(self) -> NodeIdx {
        match self.role {
            Role::Prefill => NodeIdx::Prefill(PrefillIdx(self.index)),
            Role::Decode => NodeIdx::Decode(DecodeIdx(self.index)),
        }
    }
}

/// A `NodeId` split by role into the typed index of that role (`NodeId::idx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeIdx {
    Prefill(PrefillIdx),
    Decode(DecodeIdx),
}

/// A prefill node's index (its place in `World::prefill`): a `u16` that cannot be confused with a
/// decode node's. Serialises, hashes and prints (`Debug`) as the bare number, so the JSON trace,
/// the trace encoding and the state digest read the same as for a raw `u16`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PrefillIdx(pub u16);

/// A decode node's index (its place in `World::decode`); see `PrefillIdx`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DecodeIdx(pub u16);

impl PrefillIdx {
    /// The index into `World::prefill`.
    pub fn at(self) -> usize {
        usize::from(self.0)
    }
    pub fn node(self) -> NodeId {
        NodeId { role: Role::Prefill, index: self.0 }
    }
}

impl DecodeIdx {
    /// The index into `World::decode`.
    pub fn at(self) -> usize {
        usize::from(self.0)
    }
    pub fn node(self) -> NodeId {
        NodeId { role: Role::Decode, index: self.0 }
    }
}

impl fmt::Display for PrefillIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for PrefillIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for DecodeIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for DecodeIdx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A transfer job (`World::jobs`), numbered in submission order from 0 and never reused: a `u32`
/// that cannot be confused with a batch number or a page. Serialises, hashes and prints (`Debug`)
/// as the bare number, so the JSON trace, the trace encoding (`trace::encode` writes `.0`) and the
/// state digest read the same as for a raw `u32`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u32);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A KV pool is owned by exactly one node; its name is the node's.
pub type PoolId = NodeId;

/// An integer probability `num/den`. Floats never decide anything in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ratio {
    pub num: u64,
    pub den: u64,
}

impl Ratio {
    pub const NEVER: Ratio = Ratio { num: 0, den: 1 };
    pub const ALWAYS: Ratio = Ratio { num: 1, den: 1 };

    /// Parses `"3/1000"`, `"0"` or `"1"`.
    pub fn parse(s: &str) -> Result<Ratio, RatioError> {
        let s = s.trim();
        let (n, d) = match s.split_once('/') {
            Some((n, d)) => (n.trim(), d.trim()),
            None => (s, "1"),
        };
        let err = |why| RatioError { input: s.to_string(), why };
        // Digits only: `u64::from_str` takes a sign ("+1/2" passed, and the schema refused it).
        if [n, d].iter().any(|x| !x.bytes().all(|b| b.is_ascii_digit())) {
            return Err(err(RatioFault::NotARatio));
        }
        let num: u64 = n.parse().map_err(|_| err(RatioFault::NotARatio))?;
        let den: u64 = d.parse().map_err(|_| err(RatioFault::NotARatio))?;
        if den == 0 {
            return Err(err(RatioFault::ZeroDenominator));
        }
        if num > den {
            return Err(err(RatioFault::AboveOne));
        }
        Ok(Ratio { num, den })
    }
    pub fn is_never(self) -> bool {
        self.num == 0
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

/// A string that is not a probability (`Ratio::parse`); the scenario reader places it at its
/// file, line and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RatioError {
    /// The text given, trimmed.
    pub input: String,
    pub why: RatioFault,
}

/// What is wrong with a ratio's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RatioFault {
    /// Not `N/D` (or `N`) with non-negative integers.
    NotARatio,
    ZeroDenominator,
    /// `N > D`.
    AboveOne,
}

impl fmt::Display for RatioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.input;
        match self.why {
            RatioFault::NotARatio => write!(f, "`{s}` is not a ratio like \"3/1000\""),
            RatioFault::ZeroDenominator => write!(f, "`{s}`: denominator is 0"),
            RatioFault::AboveOne => write!(f, "`{s}`: a probability cannot exceed 1"),
        }
    }
}

impl std::error::Error for RatioError {}

/// FNV-1a over little-endian encodings: the same bytes give the same hash on every machine.
/// `std`'s default hasher is randomly keyed and its integer writes are native-endian.
#[derive(Clone, Debug)]
pub struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for StableHasher {
    fn finish(&self) -> u64 {
        // A final avalanche so that near-identical sequences give visibly different hashes.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u16(&mut self, i: u16) {
        self.write(&i.to_le_bytes())
    }
    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes())
    }
    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes())
    }
    fn write_usize(&mut self, i: usize) {
        self.write(&(i as u64).to_le_bytes())
    }
    fn write_isize(&mut self, i: isize) {
        self.write(&(i as i64).to_le_bytes())
    }
    fn write_i64(&mut self, i: i64) {
        self.write(&i.to_le_bytes())
    }
}
