//! Trace sinks with files behind them: the streaming JSON Lines writer (bounded memory) and the
//! replay comparer that reads a trace file line by line alongside a new run.

use kvsim::trace::{TraceRecord, TraceSink};
use kvsim::tracefile::{line_json, Filter, Item, Kept, ReadOptions, TraceError, TraceReader};
use kvsim::types::Instant;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::rc::Rc;

/// Writes each record as it happens. I/O errors are kept and reported after the run.
pub struct JsonlWriter {
    out: BufWriter<File>,
    filter: Option<Filter>,
    page_size: u64,
    pub state: Rc<RefCell<WriterState>>,
}

#[derive(Default)]
pub struct WriterState {
    pub written: u64,
    pub error: Option<String>,
}

impl JsonlWriter {
    pub fn new(
        out: BufWriter<File>,
        filter: Option<Filter>,
        page_size: u64,
    ) -> (JsonlWriter, Rc<RefCell<WriterState>>) {
        let state = Rc::new(RefCell::new(WriterState::default()));
        (JsonlWriter { out, filter, page_size, state: state.clone() }, state)
    }
}

/// The records a sink takes for `rec`: itself, none, or the rewritten records a filter keeps of
/// it (a decode step with only some entries kept), shared by the writer and the comparer so a
/// filtered recording and its replay see the same records.
fn kept<'a>(filter: Option<&Filter>, rec: &'a TraceRecord, page_size: u64) -> Cow<'a, [TraceRecord]> {
    match filter.map(|f| f.kept(rec, page_size)) {
        None | Some(Kept::All) => Cow::Borrowed(std::slice::from_ref(rec)),
        Some(Kept::None) => Cow::Borrowed(&[]),
        Some(Kept::Rewritten(recs)) => Cow::Owned(recs),
    }
}

impl TraceSink for JsonlWriter {
    fn record(&mut self, at: Instant, rec: &TraceRecord) {
        for r in kept(self.filter.as_ref(), rec, self.page_size).iter() {
            self.write(at, r);
        }
    }
}

impl JsonlWriter {
    fn write(&mut self, at: Instant, rec: &TraceRecord) {
        let mut st = self.state.borrow_mut();
        if st.error.is_some() {
            return;
        }
        if let Err(e) = writeln!(self.out, "{}", line_json(at, rec)) {
            st.error = Some(e.to_string());
        }
        st.written += 1;
    }
}

impl Drop for JsonlWriter {
    fn drop(&mut self) {
        if let Err(e) = self.out.flush() {
            self.state.borrow_mut().error.get_or_insert(e.to_string());
        }
    }
}

/// Compares each new record with the next record of the recorded trace.
pub struct Comparer {
    filter: Option<Filter>,
    page_size: u64,
    pub state: Rc<RefCell<CompareState>>,
}

pub struct CompareState {
    pub reader: TraceReader<Box<dyn std::io::BufRead>>,
    pub compared: u64,
    /// (line, recorded, replayed)
    pub divergence: Option<(usize, String, String)>,
    /// A trace line that does not read (bad input rather than a divergence).
    pub error: Option<TraceError>,
}

impl Comparer {
    pub fn new(reader: TraceReader<Box<dyn std::io::BufRead>>) -> (Comparer, Rc<RefCell<CompareState>>) {
        let filter = reader.header.filter.clone().map(Filter::normalized);
        let page_size = reader.header.config.knobs.page_size;
        let state = Rc::new(RefCell::new(CompareState { reader, compared: 0, divergence: None, error: None }));
        (Comparer { filter, page_size, state: state.clone() }, state)
    }
}

impl TraceSink for Comparer {
    fn record(&mut self, at: Instant, rec: &TraceRecord) {
        for r in kept(self.filter.as_ref(), rec, self.page_size).iter() {
            self.compare(at, r);
        }
    }
}

impl Comparer {
    fn compare(&mut self, at: Instant, rec: &TraceRecord) {
        let mut st = self.state.borrow_mut();
        if st.divergence.is_some() || st.error.is_some() {
            return;
        }
        let mine = line_json(at, rec);
        let theirs = match st.reader.next_item() {
            Ok(Some(Item::Record { text, .. })) => text,
            Ok(Some(Item::Footer(_))) => String::from("<the footer: the recorded trace has fewer records>"),
            Ok(None) => {
                // No footer before the end: a file cut short is bad input (as `confirm` says it),
                // not a divergence of the model.
                let (file, line) = (st.reader.file().to_string(), st.reader.line());
                st.error = Some(kvsim::tracefile::TraceError {
                    file,
                    line,
                    message: "the file ends without its footer (the trace was cut short)".into(),
                });
                return;
            }
            Err(e) => {
                st.error = Some(e);
                return;
            }
        };
        if theirs != mine {
            let line = st.reader.line();
            st.divergence = Some((line, theirs, mine));
        } else {
            st.compared += 1;
        }
    }
}

/// Opens a trace file and reads its header (see `TraceReader::open`).
pub fn open(path: &str, opts: ReadOptions) -> Result<TraceReader<Box<dyn std::io::BufRead>>, TraceError> {
    let unreadable =
        |e: std::io::Error| TraceError { file: path.to_string(), line: 0, message: format!("cannot read: {e}") };
    // A pipe gives its bytes once, and `confirm` and `shrink` read a trace more than once: a
    // stream is read whole, once for the process (`read_stream`).
    let src: Box<dyn std::io::BufRead> = if super::is_stream(path) {
        Box::new(std::io::Cursor::new(super::read_stream(path).map_err(unreadable)?))
    } else {
        Box::new(BufReader::new(File::open(path).map_err(unreadable)?))
    };
    TraceReader::open(path, src, opts)
}
