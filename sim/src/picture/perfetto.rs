//! Perfetto / Chrome trace-event JSON of a run.
