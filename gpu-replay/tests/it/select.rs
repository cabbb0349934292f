//! Backend selection without a CUDA driver: `Unavailable`, never a panic; `Auto` falls
//! back to the CPU with a note. On a machine that has CUDA the tests check the other side.

use kvsim_gpu::{bandwidth_check, cuda_probe, select, AttnShape, BackendChoice, GpuError, CPU_FALLBACK_NOTE};

#[test]
fn cuda_without_a_driver_is_unavailable_not_a_panic() {
    match (cuda_probe(), select(BackendChoice::Cuda)) {
        (Err(_), Err(GpuError::Unavailable(why))) => assert!(!why.is_empty()),
        (Err(why), other) => panic!("probe said {why:?} but select gave {:?}", other.map(|(b, n)| (b.name(), n))),
        (Ok(()), Ok((b, note))) => {
            assert_eq!(b.name(), "cuda");
            assert_eq!(note, None);
        }
        (Ok(()), Err(e)) => panic!("CUDA probed fine but could not be opened: {e}"),
    }
}

#[test]
fn auto_falls_back_to_cpu_with_a_note() {
    let (b, note) = select(BackendChoice::Auto).expect("auto never fails for want of CUDA");
    if cuda_probe().is_err() {
        assert_eq!(b.name(), "cpu");
        let note = note.expect("a fallback note");
        assert!(note.starts_with(CPU_FALLBACK_NOTE), "{note}");
    } else {
        assert_eq!(b.name(), "cuda");
    }
}

#[test]
fn cpu_is_always_available() {
    let (b, note) = select(BackendChoice::Cpu).expect("cpu");
    assert_eq!(b.name(), "cpu");
    assert_eq!(note, None);
}

#[test]
fn bandwidth_check_needs_cuda() {
    if cuda_probe().is_err() {
        let e = bandwidth_check(AttnShape::default_small(), 1 << 12).unwrap_err();
        assert!(matches!(e, GpuError::Unavailable(_)), "{e}");
    }
}

#[test]
fn backend_choice_parses() {
    assert_eq!("auto".parse::<BackendChoice>(), Ok(BackendChoice::Auto));
    assert_eq!("cuda".parse::<BackendChoice>(), Ok(BackendChoice::Cuda));
    assert!("gpu".parse::<BackendChoice>().is_err());
}
