//! The deadline queue for foca's timer events. Pure: time is passed in, never read.
//!
//! foca asks its runtime to hand timer events back after a delay
//! ([`foca::Runtime::submit_after`]) and requires that every event is delivered; events due at
//! the same instant are delivered in submission order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

struct Entry<T> {
    due: Instant,
    seq: u64,
    event: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due && self.seq == other.seq
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest deadline on top.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// Min-heap of `(deadline, event)`.
pub struct TimerQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T> TimerQueue<T> {
    /// Schedules `event` at `now + after` (a year from now if that is not representable).
    pub fn schedule(&mut self, now: Instant, after: Duration, event: T) {
        let due = now
            .checked_add(after)
            .or_else(|| now.checked_add(Duration::from_secs(86_400 * 365)))
            .unwrap_or(now);
        self.heap.push(Entry {
            due,
            seq: self.next_seq,
            event,
        });
        self.next_seq = self.next_seq.wrapping_add(1);
    }

    /// Whether a pending event satisfies `pred` (a pass over the queue).
    pub fn any(&self, mut pred: impl FnMut(&T) -> bool) -> bool {
        self.heap.iter().any(|e| pred(&e.event))
    }

    /// The earliest deadline, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.due)
    }

    /// Removes and returns the earliest event due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        self.pop_due_with_deadline(now).map(|(_, event)| event)
    }

    /// Like [`TimerQueue::pop_due`], with the instant the event was due (so the caller can tell
    /// how late it runs).
    pub fn pop_due_with_deadline(&mut self, now: Instant) -> Option<(Instant, T)> {
        if self.heap.peek().is_some_and(|e| e.due <= now) {
            self.heap.pop().map(|e| (e.due, e.event))
        } else {
            None
        }
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_then_submission_order() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.schedule(t0, Duration::from_millis(30), "c");
        q.schedule(t0, Duration::from_millis(10), "a");
        q.schedule(t0, Duration::from_millis(10), "b");
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_millis(10)));
        assert_eq!(q.pop_due(t0 + Duration::from_millis(5)), None);
        let later = t0 + Duration::from_millis(40);
        assert_eq!(q.pop_due(later), Some("a"));
        assert_eq!(q.pop_due(later), Some("b"));
        assert_eq!(q.pop_due(later), Some("c"));
        assert_eq!(q.pop_due(later), None);
        assert!(q.is_empty());
    }
}
