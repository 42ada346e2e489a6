// tide-init: the first process of every OCI container the agent starts
// (OciRuntime), bound read-only into the container at /.tide/init. It is a
// static binary, so it runs in any image, with or without a libc.
//
//   tide-init COMMAND [ARG]...
//
// As the container's pid 1 it
//   - dies with the runc process that started it (PR_SET_PDEATHSIG): when
//     the agent dies, runc dies with it, then this process, and the kernel
//     kills everything else in the container's pid namespace with it;
//   - starts COMMAND (looked up in PATH) and reaps every orphan meanwhile;
//   - exits when COMMAND exits, with its exit code, or 128+S when signal S
//     killed it (the shell's convention), which ends the container.
// Signals the agent sends (the stop notice's SIGTERM) go to the job's own
// processes, not to this one, so a job handles them as it would anywhere.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tide-init COMMAND [ARG]...\n");
    return 2;
  }
  // Not dumpable: the job (same uid) may not write this process's memory
  // through /proc/1/mem to undo the parent-death signal. Its exec resets
  // this for the command.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::prctl(PR_SET_DUMPABLE, 0) != 0) {
    std::fprintf(stderr, "tide-init: prctl: %s\n", std::strerror(errno));
    return 126;
  }
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "tide-init: fork: %s\n", std::strerror(errno));
    return 126;
  }
  if (child == 0) {
    ::execvp(argv[1], argv + 1);
    int e = errno;
    std::fprintf(stderr, "tide-init: %s: %s\n", argv[1], std::strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }
  for (;;) {
    int status = 0;
    pid_t pid = ::wait(&status);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return 126;  // ECHILD: cannot happen while the command lives
    }
    if (pid != child) continue;  // an orphan, reaped
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }
}
