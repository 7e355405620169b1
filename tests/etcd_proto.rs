//! The etcd client's generated code (crates/fleet/src/etcd/generated/) is what proto/etcd/ compiles
//! to: regenerated here with protox (a protobuf compiler in Rust, so no protoc) and tonic's
//! generator, and compared byte for byte. `GTD_REGENERATE=1 cargo test --test etcd_proto`
//! writes the files instead, after a change to the .proto files.

use std::path::Path;

#[test]
fn the_checked_in_etcd_client_code_is_what_the_proto_files_compile_to() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let protos = root.join("proto");
    let fds = protox::compile(["etcd/rpc.proto", "etcd/kv.proto"], [&protos])
        .unwrap_or_else(|e| panic!("proto/etcd/ does not compile: {e}"));
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("generating the client");
    let checked_in = root.join("crates/fleet/src/etcd/generated");
    let regenerate = std::env::var_os("GTD_REGENERATE").is_some();
    for name in ["etcdserverpb.rs", "mvccpb.rs"] {
        let fresh = std::fs::read_to_string(out.path().join(name)).unwrap();
        let path = checked_in.join(name);
        if regenerate {
            std::fs::write(&path, &fresh).unwrap();
            continue;
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == fresh,
            "{} differs from what proto/etcd/ generates: run \
             `GTD_REGENERATE=1 cargo test --test etcd_proto` and commit the result",
            path.display()
        );
    }
}
