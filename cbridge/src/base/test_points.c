/*
 * Test points (internal.h's JB_TEST_POINT): where a test runs code of its own. Compiled only
 * with JB_TEST_HOOKS (cbridge/Makefile's hook tests); a normal build has no code here, and its
 * JB_TEST_POINT is nothing.
 */
#include "base.h"

#ifdef JB_TEST_HOOKS
static _Atomic(jb_test_point_fn) point_fns[JB_TEST_POINTS];
static void *_Atomic point_ctxs[JB_TEST_POINTS];

void jb__test_set_point(jb_test_point point, jb_test_point_fn fn, void *ctx)
{
    atomic_store(&point_ctxs[point], ctx);
    atomic_store(&point_fns[point], fn);
}

void jb__test_point(jb_test_point point, const char *arg)
{
    jb_test_point_fn fn = atomic_load(&point_fns[point]);
    if (fn)
        fn(atomic_load(&point_ctxs[point]), arg);
}
#endif
