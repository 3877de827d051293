//! [`DueQueue`]: work that comes due after one fixed delay, for a
//! backend's background task that starts delayed watches.

use std::collections::VecDeque;

use tokio::time::Instant;

/// Items queued with a due time, taken out once due. Callers use one
/// delay, so the order items are queued in is the order they come due.
///
/// An item may stop being wanted before it is due (its lock released).
/// [`next_due`](Self::next_due) drops such items from the front, so a task
/// sleeping until the next due time does not wake for them: a lock held
/// and released every millisecond would otherwise wake it every
/// millisecond, for nothing.
#[derive(Debug)]
pub struct DueQueue<T> {
    due: VecDeque<(Instant, T)>,
}

impl<T> Default for DueQueue<T> {
    fn default() -> Self {
        Self {
            due: VecDeque::new(),
        }
    }
}

impl<T> DueQueue<T> {
    /// Queues `item`, due at `at`. True if the queue was empty, i.e. the
    /// task taking items out has no due time to wait for and must be
    /// woken (or started).
    pub fn push(&mut self, at: Instant, item: T) -> bool {
        let first = self.due.is_empty();
        self.due.push_back((at, item));
        first
    }

    /// When the first item still `wanted` is due, after dropping the
    /// unwanted ones ahead of it; `None` leaves the queue empty.
    pub fn next_due(&mut self, wanted: impl Fn(&T) -> bool) -> Option<Instant> {
        while let Some((at, item)) = self.due.front() {
            if wanted(item) {
                return Some(*at);
            }
            self.due.pop_front();
        }
        None
    }

    /// Takes out every item due by `now`, wanted or not, in due order.
    pub fn take_due(&mut self, now: Instant) -> Vec<T> {
        let ready = self.due.partition_point(|(at, _)| *at <= now);
        self.due.drain(..ready).map(|(_, item)| item).collect()
    }

    /// Drops every item.
    pub fn clear(&mut self) {
        self.due.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn items_come_out_in_due_order_and_unwanted_ones_set_no_due_time() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let mut queue = DueQueue::default();
        assert!(queue.push(now, 1));
        assert!(!queue.push(now + ms(1), 2));
        assert!(!queue.push(now + ms(9), 3));
        assert_eq!(queue.take_due(now + ms(1)), [1, 2]);
        assert_eq!(queue.next_due(|_| true), Some(now + ms(9)));
        assert_eq!(queue.next_due(|&item| item != 3), None);
        assert!(queue.take_due(now + ms(10)).is_empty());
        assert!(queue.push(now, 4), "emptied: the next item is first again");
        queue.clear();
        assert_eq!(queue.next_due(|_| true), None);
    }
}
