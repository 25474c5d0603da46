//! A latency histogram in nanoseconds, for the bench's rows and the soak's decode steps.

/// Latencies in nanoseconds: exact below 4096 ns, then 16 buckets per power of two.
pub struct Histogram {
    counts: Vec<u64>,
    pub max: u64,
}

impl Histogram {
    pub fn new() -> Self {
        let mut counts = vec![0; 4096 + 64 * 16];
        // Touch every page now, not on the first record (a page fault would be measured).
        for page in counts.chunks_mut(512) {
            page[0] = 1;
            page[0] = std::hint::black_box(page[0]) - 1;
        }
        Histogram { counts, max: 0 }
    }
    fn bucket(ns: u64) -> usize {
        if ns < 4096 {
            return ns as usize;
        }
        let power = 63 - ns.leading_zeros() as usize; // >= 12
        let sub = ((ns >> (power - 4)) & 15) as usize;
        (4096 + (power - 12) * 16 + sub).min(4096 + 64 * 16 - 1)
    }
    fn lower_bound(bucket: usize) -> u64 {
        if bucket < 4096 {
            return bucket as u64;
        }
        let power = (bucket - 4096) / 16 + 12;
        let sub = ((bucket - 4096) % 16) as u64;
        (1u64 << power) + (sub << (power - 4))
    }
    pub fn record(&mut self, ns: u64) {
        self.counts[Self::bucket(ns)] += 1;
        self.max = self.max.max(ns);
    }
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.max = self.max.max(other.max);
    }
    /// (lower bound, count) per power of two: [0, 1), [1, 2), [2, 4), ...; empty ones left out.
    pub fn log2_buckets(&self) -> Vec<(u64, u64)> {
        let mut powers = [0u64; 65];
        for (bucket, &count) in self.counts.iter().enumerate().filter(|(_, c)| **c > 0) {
            powers[(64 - Self::lower_bound(bucket).leading_zeros()) as usize] += count;
        }
        powers
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(p, c)| (if p == 0 { 0 } else { 1u64 << (p - 1) }, *c))
            .collect()
    }
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    pub fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.counts.iter().sum();
        let wanted = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= wanted && count > 0 {
                return Self::lower_bound(bucket);
            }
        }
        self.max
    }
}
