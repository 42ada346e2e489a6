// Clang's thread-safety annotations (-Wthread-safety): which mutex guards a
// member, which a function needs held. Under other compilers they are
// nothing. Use them with the annotated mutexes of common/mutex.h; the
// standard library's are not annotated.
#pragma once

#if defined(__clang__)
#define TIDE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TIDE_THREAD_ANNOTATION(x)
#endif

#define TIDE_CAPABILITY(x) TIDE_THREAD_ANNOTATION(capability(x))
#define TIDE_SCOPED_CAPABILITY TIDE_THREAD_ANNOTATION(scoped_lockable)
#define TIDE_GUARDED_BY(x) TIDE_THREAD_ANNOTATION(guarded_by(x))
#define TIDE_PT_GUARDED_BY(x) TIDE_THREAD_ANNOTATION(pt_guarded_by(x))
#define TIDE_REQUIRES(...) TIDE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TIDE_REQUIRES_SHARED(...) TIDE_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define TIDE_ACQUIRE(...) TIDE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TIDE_ACQUIRE_SHARED(...) TIDE_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define TIDE_RELEASE(...) TIDE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TIDE_RELEASE_SHARED(...) TIDE_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TIDE_RELEASE_GENERIC(...) TIDE_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TIDE_ASSERT_CAPABILITY(x) TIDE_THREAD_ANNOTATION(assert_capability(x))
#define TIDE_ASSERT_SHARED_CAPABILITY(x) TIDE_THREAD_ANNOTATION(assert_shared_capability(x))
#define TIDE_EXCLUDES(...) TIDE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TIDE_NO_THREAD_SAFETY_ANALYSIS TIDE_THREAD_ANNOTATION(no_thread_safety_analysis)
