//! Compiles the ABI layer (csrc/abi.c) with the MPI library's own compiler wrapper, the
//! one `MPICC` names (as for the `mpi` crate: `MPICC=mpicc.mpich` or `mpicc.openmpi`;
//! default `mpicc`), and says whether its header has MPI-4's large-count calls.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=csrc/abi.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo::rustc-check-cfg=cfg(large_count)");
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    cc::Build::new()
        .compiler(&mpicc)
        .file("csrc/abi.c")
        .warnings(true)
        .compile("rma_mpi_abi");
    // MPI_Put_c and the other _c calls came with MPI-4.0 (MPICH 4; not Open MPI 4.1).
    let show = Command::new(&mpicc)
        .arg("-show")
        .output()
        .or_else(|_| Command::new(&mpicc).arg("-showme").output())
        .expect("run MPICC -show");
    let flags = String::from_utf8_lossy(&show.stdout).into_owned();
    let has_large_count = flags
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("-I"))
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "h"))
        .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("int MPI_Put_c(")));
    if has_large_count {
        println!("cargo:rustc-cfg=large_count");
    }
}
