// ThreadSanitizer's built-in options and suppressions for --config=tsan,
// compiled into every binary of that configuration (with
// absl_sync_annotations.cc), so that they hold wherever a binary runs: under
// `bazel test`, and for daemons started by hand or by the shell tests.
// TSAN_OPTIONS in the environment is read after these and can override them.
// Without TSan this file compiles to nothing.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AQ_TSAN_DEFAULTS 1
#endif
#endif
#if !defined(AQ_TSAN_DEFAULTS) && defined(__SANITIZE_THREAD__)
#define AQ_TSAN_DEFAULTS 1
#endif

#ifdef AQ_TSAN_DEFAULTS

extern "C" {

// ignore_noninstrumented_modules=1: libc calls (memcpy, free, ...) made from
// inside Debian's uninstrumented libraries (gRPC, protobuf, absl, libstdc++,
// Gloo) are not checked; their own synchronisation is invisible to TSan, so
// those checks only produce false reports inside gRPC's internals. Our code is
// all in the executable (--dynamic_mode=off), which TSan treats as
// instrumented.
const char* __tsan_default_options() {
  return "ignore_noninstrumented_modules=1:second_deadlock_stack=1";
}

// One line per suppression, each as narrow as the report allows.
const char* __tsan_default_suppressions() {
  return
      // Thread leak of gRPC's own threads (grpc_core::Thread: the executor,
      // resolver and timer threads). gRPC joins them in grpc_shutdown, which
      // it completes asynchronously after the last channel or server is
      // gone, so a process that exits right after its last RPC (seen in
      // common:coordinator_client_test, the unreachable-coordinator case)
      // can end before the join. Matches only threads whose creation stack
      // goes through gRPC's thread wrapper.
      "thread:grpc_core::Thread::Thread\n";
}

}  // extern "C"

#endif  // AQ_TSAN_DEFAULTS
