//! A progress bar that appears only once a run has lasted a second.

use std::time::Instant;

use catena::runtime::Progress;
use indicatif::{ProgressBar, ProgressStyle};

pub struct Bar {
    start: Instant,
    bar: Option<ProgressBar>,
    enabled: bool,
}

impl Bar {
    pub fn new(enabled: bool) -> Bar {
        Bar {
            start: Instant::now(),
            bar: None,
            enabled,
        }
    }
}

impl Progress for Bar {
    fn update(&mut self, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        if self.bar.is_none() && self.start.elapsed().as_secs_f64() > 1.0 {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} packets  {per_sec}  eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
