//! Trace sinks with files behind them: the streaming JSON Lines writer (bounded memory) and the
//! replay comparer that reads a trace file line by line alongside a new run.

use kvsim::trace::{TraceRecord, TraceSink};
use kvsim::tracefile::{line_json, Filter};
use kvsim::types::Instant;
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Lines, Write};
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

impl TraceSink for JsonlWriter {
    fn record(&mut self, at: Instant, rec: &TraceRecord) {
        if let Some(f) = &self.filter {
            if !f.keeps(rec, self.page_size) {
                return;
            }
        }
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

/// Compares each new record with the next line of the recorded trace.
pub struct Comparer {
    filter: Option<Filter>,
    page_size: u64,
    pub state: Rc<RefCell<CompareState>>,
}

pub struct CompareState {
    lines: Lines<BufReader<File>>,
    /// 1-based line number of the last line read.
    pub line: usize,
    pub compared: u64,
    /// (line, recorded, replayed)
    pub divergence: Option<(usize, String, String)>,
}

impl CompareState {
    /// The next line of the file (after the run: the footer).
    pub fn next_line(&mut self) -> Option<String> {
        let l = self.lines.next()?;
        self.line += 1;
        Some(l.unwrap_or_else(|_| String::from("<unreadable>")))
    }
}

impl Comparer {
    pub fn new(
        lines: Lines<BufReader<File>>,
        first_line: usize,
        filter: Option<Filter>,
        page_size: u64,
    ) -> (Comparer, Rc<RefCell<CompareState>>) {
        let state = Rc::new(RefCell::new(CompareState { lines, line: first_line, compared: 0, divergence: None }));
        (Comparer { filter, page_size, state: state.clone() }, state)
    }
}

impl TraceSink for Comparer {
    fn record(&mut self, at: Instant, rec: &TraceRecord) {
        if self.state.borrow().divergence.is_some() {
            return;
        }
        if let Some(f) = &self.filter {
            if !f.keeps(rec, self.page_size) {
                return;
            }
        }
        let mine = line_json(at, rec);
        let mut st = self.state.borrow_mut();
        let theirs = st.next_line().unwrap_or_else(|| String::from("<end of file>"));
        if theirs != mine {
            let line = st.line;
            st.divergence = Some((line, theirs, mine));
        } else {
            st.compared += 1;
        }
    }
}

/// Opens a trace file for reading line by line.
pub fn open_lines(path: &str) -> Result<Lines<BufReader<File>>, String> {
    File::open(path).map(|f| BufReader::new(f).lines()).map_err(|e| format!("{path}: cannot read: {e}"))
}
