# The C flags and test-only lock removals, in one place for cbridge/Makefile and build.rs.
# build.rs parses this file: keep each entry one `NAME = words` line, no make functions.
# Optimisation and debug flags are not here: CFLAGS (make) or the cargo profile set them.
JB_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -fPIC -fvisibility=hidden -pthread
JB_LDLIBS = -pthread -ldl -lm

# REMOVE_LOCK=NAME on make's command line, or RUSTFLAGS='--cfg jitbridge_remove_lock="NAME"'
# (cargo), defines JB_REMOVE_LOCK_NAME's macro: a test-only build without that lock, to show
# that the tests catch the race.
JB_REMOVE_LOCK_jit_cache = JB_REMOVE_LOCK_JIT_CACHE
JB_REMOVE_LOCK_event_pool = JB_REMOVE_LOCK_EVENT_POOL
JB_REMOVE_LOCK_configure = JB_REMOVE_LOCK_CONFIGURE
