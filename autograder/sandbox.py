"""Kernel launcher used by the grading kernelspec: limits, isolation, then exec the real ipykernel.

    python sandbox.py SETTINGS_JSON -f CONNECTION_FILE

SETTINGS_JSON: {"mem": bytes, "fsize": bytes, "hide": [paths], "user": uid or null, "python": path,
"guard": path}. As root (of the machine, or of the user namespace the worker runs in) it enters a private
mount namespace, covers `hide` with empty read-only tmpfs mounts (the instructor's solutions, the
gradebooks, the other students' submissions), makes everything else read-only but the task's folder and
a fresh /tmp, gives the kernel its own home, and drops to `user`. Then it caps the address space
(RLIMIT_AS), file size and core dumps, drops every capability for good (a kernel left as uid 0 cannot undo
its mounts), and execs ipykernel with the guard loaded before any learner code. The guard's secret comes
from TRAINCLINIC_GUARD_TOKEN and goes over a pipe.
"""
import ctypes
import json
import os
import resource
import shutil
import sys

CLONE_NEWNS = 0x00020000
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # each gets a fresh, empty tmpfs in the sandbox


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
# a mount's own flags, kept on a read-only remount: in a user namespace the kernel refuses to clear them
_KEEP = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: 8, os.ST_NOATIME: 1024,
         os.ST_NODIRATIME: 2048, os.ST_RELATIME: 1 << 21}


def _mounts():
    """Mount points of this namespace (octal escapes decoded)."""
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p.encode().decode("unicode_escape") for p in points]


def _remount(libc, point, readonly=True):
    """Remount `point` read-only (or writable), keeping its other flags."""
    try:
        have = os.statvfs(point).f_flag
    except OSError:
        return
    flags = MS_BIND | MS_REMOUNT | (MS_RDONLY if readonly else 0) | sum(ms for st, ms in _KEEP.items() if have & st)
    libc.mount(None, point.encode(), None, flags, None)


def _isolate(cfg, conn):
    """Private mount namespace: everything read-only, the instructor's files hidden, a fresh /tmp, only the
    task's own folder writable; then drop to an unprivileged user when the python install allows it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        return conn
    libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
    task, home, uid, cwd = cfg["task"], cfg["home"], cfg.get("user"), os.getcwd()
    os.makedirs(home, exist_ok=True)
    private = os.path.join(home, "kernel.json")
    shutil.copy(conn, private)
    keep = os.open(task, os.O_RDONLY | os.O_DIRECTORY)
    for point in _mounts():
        if not point.startswith(("/proc", "/sys", "/dev")):
            _remount(libc, point)
    for path in cfg.get("hide", []):
        if os.path.isdir(path):
            libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, b"size=4k,mode=0755")
    scratch = SCRATCH
    # the venv, python and trainclinic may live under /tmp (a CI clone): hold them open, bind them back read-only
    needed = [(p, os.open(p, os.O_RDONLY | os.O_DIRECTORY)) for p in cfg.get("keep", [])
              if os.path.isdir(p) and any(p == s or p.startswith(s + "/") for s in scratch)]
    for path in scratch:
        if os.path.isdir(path):
            libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=512m,mode=1777")
    for path, fd in needed:
        os.makedirs(path, exist_ok=True)
        libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None)
        _remount(libc, path)
        os.close(fd)
    os.makedirs(task, exist_ok=True)  # inside the fresh /tmp when the task lived there: bind the real one back
    libc.mount(f"/proc/self/fd/{keep}".encode(), task.encode(), None, MS_BIND, None)
    _remount(libc, task, readonly=False)
    os.close(keep)
    os.chdir(cwd)
    if uid is not None:
        for path in (home, private, cwd):
            os.chown(path, uid, uid)
        os.chmod(private, 0o600)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return private


def _drop_caps():
    """No capabilities left and none regained on exec, even as uid 0: the kernel cannot undo its mounts."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = lambda *a: libc.prctl(*(ctypes.c_ulong(x) for x in (*a, 0, 0, 0)[:5]))
    pr_capbset_drop, pr_set_securebits, pr_set_no_new_privs, pr_cap_ambient, ambient_clear_all = 24, 28, 38, 47, 4
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        prctl(pr_capbset_drop, cap)
    prctl(pr_cap_ambient, ambient_clear_all)
    prctl(pr_set_securebits, 0xEF)  # noroot, no_setuid_fixup, no_cap_ambient_raise, keep_caps: all locked
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    libc.capset(header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: empty
    prctl(pr_set_no_new_privs, 1)


def main(argv):
    with open(argv[1]) as f:
        cfg = json.load(f)
    conn = argv[argv.index("-f") + 1]
    if cfg.get("isolate") and os.geteuid() == 0:
        conn = _isolate(cfg, conn)
    env = dict(os.environ)
    env.update(HOME=cfg["home"], IPYTHONDIR=os.path.join(cfg["home"], ".ipython"),
               MPLCONFIGDIR=os.path.join(cfg["home"], ".mpl"), MALLOC_ARENA_MAX="2",
               OMP_NUM_THREADS=str(cfg.get("threads", 1)), MKL_NUM_THREADS=str(cfg.get("threads", 1)))
    token = env.pop("TRAINCLINIC_GUARD_TOKEN", "")
    read, write = os.pipe()
    os.write(write, token.encode())
    os.close(write)
    os.set_inheritable(read, True)
    env["TRAINCLINIC_GUARD_FD"] = str(read)
    for res, value in ((resource.RLIMIT_AS, cfg.get("mem")), (resource.RLIMIT_FSIZE, cfg.get("fsize")),
                       (resource.RLIMIT_CORE, 0)):
        if value is not None:
            resource.setrlimit(res, (value, value))
    if cfg.get("isolate"):
        _drop_caps()
    guard = cfg["guard"]
    boot = f"exec(compile(open({guard!r}).read(), {guard!r}, 'exec'), {{'__name__': 'trainclinic_guard'}})"
    # plain tracebacks (autograder/nbgrader_config.py says why: the default mode costs 0.3-0.4 s per traceback)
    args = [cfg["python"], "-m", "ipykernel_launcher", "-f", conn, "--HistoryManager.hist_file=:memory:",
            "--InteractiveShell.xmode=Plain", f"--IPKernelApp.exec_lines={boot}"]
    os.execve(cfg["python"], args, env)


if __name__ == "__main__":
    main(sys.argv)
