/* Preloaded before Debian's libfaketime 0.9.10 by testkit/soak_faults.py (clock jumps).
 *
 * The soak fakes one pod's wall clock only (FAKETIME_DONT_FAKE_MONOTONIC=1), but 0.9.10
 * still rewrites the deadlines of waits on the monotonic clock with its wall-clock
 * arithmetic (upstream issues #426 and #503):
 *
 * - clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): Python >= 3.11's time.sleep() fails
 *   with EINVAL (an offset ahead) or sleeps for the offset (one behind);
 * - pthread_cond_timedwait on a condition variable of the monotonic clock (the GIL's
 *   switch interval, threading's timed waits): a `sardeenz serve` under libfaketime
 *   with only the fix above never became ready, its threads in a futex and
 *   rt_sigprocmask storm (libfaketime's lock); with this one too it starts as fast as
 *   without libfaketime.
 *
 * Monotonic deadlines need no faking, so these two go to the C library unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req,
                    struct timespec *rem) {
    long r = syscall(SYS_clock_nanosleep, clock_id, flags, req, rem);
    return r == -1 ? errno : 0;
}

typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);

int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                           const struct timespec *abstime) {
    static cond_timedwait_fn real;
    if (real == NULL) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        real = (cond_timedwait_fn)dlvsym(libc, "pthread_cond_timedwait", "GLIBC_2.3.2");
    }
    return real(cond, mutex, abstime);
}
