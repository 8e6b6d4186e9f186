//! Reconciles ObjectSync records so every edge converges on the latest objects
