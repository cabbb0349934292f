//! Seeded randomness. One root seed; every component draws from its own child generator so that
//! an extra draw in one component never shifts another's sequence.

use crate::types::{Duration, Ratio};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A component's private generator.
pub struct Prng(ChaCha8Rng);

/// Boundaries of Exp(1) at i/64 (the last capped at 6), times 1e6, for integer-only exponential
/// draws (floating `ln` is not bit-identical across libms, so the model never calls it).
const EXP_BOUNDS_MICRO: [u64; 65] = [
    0, 15748, 31749, 48009, 64539, 81346, 98440, 115832, 133531, 151550, 169899, 188591, 207639, 227057, 246860,
    267063, 287682, 308735, 330242, 352221, 374693, 397683, 421213, 445311, 470004, 495321, 521297, 547965, 575364,
    603535, 632523, 662376, 693147, 724896, 757686, 791587, 826679, 863046, 900787, 940007, 980829, 1023389, 1067841,
    1114361, 1163151, 1214444, 1268511, 1325670, 1386294, 1450833, 1519826, 1593934, 1673976, 1760988, 1856298,
    1961659, 2079442, 2212973, 2367124, 2549445, 2772589, 3060271, 3465736, 4158883, 6000000,
];

impl Prng {
    /// The generator for component `stream` under `root` seed.
    pub fn child(root: u64, stream: &str) -> Prng {
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ root.rotate_left(17);
        for b in stream.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(root);
        rng.set_stream(h);
        Prng(rng)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n <= 1 {
            0
        } else {
            self.0.random_range(0..n)
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            self.0.random_range(lo..=hi)
        }
    }

    pub fn chance(&mut self, p: Ratio) -> bool {
        !p.is_never() && self.below(p.den) < p.num
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.random()
    }

    /// An exponentially distributed duration with the given mean, integer arithmetic only.
    pub fn exponential(&mut self, mean: Duration) -> Duration {
        let i = self.below(64) as usize;
        let (lo, hi) = (EXP_BOUNDS_MICRO[i], EXP_BOUNDS_MICRO[i + 1]);
        let q = lo + (hi - lo) * self.below(1024) / 1024;
        Duration((u128::from(mean.0) * u128::from(q) / 1_000_000) as u64)
    }
}

/// A tiny deterministic generator for unit tests' random operation sequences (xorshift64):
/// `next(n)` is a value below `n`. Not the model's randomness (that is `Prng`).
#[cfg(test)]
pub(crate) fn test_draws(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}
