#!/usr/bin/env python3
"""Mutation check: the suite must fail, in a test that names what broke, for each of a
list of deliberate breakages of softverbs.

Each mutation replaces one piece of text in one file, or applies a one-file diff
(mutations.py). For each, this script
copies the checkout (committed files plus working-tree changes, via `git ls-files`) to a
scratch directory once, applies the mutation there, rebuilds (gcc, incremental), runs the
tests the mutation names (`--full`: the whole gcc ctest as well) and reverts it. A
mutation "is caught" when at least one of its tests fails; one that is not caught, or
whose text no longer exists in the tree (stale), fails the run.

usage: tests/mutations/run.py [--full] [--keep DIR] [NAME ...]
Exit 0 when every selected mutation was caught.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from mutations import MUTATIONS  # noqa: E402


def sh(cmd, cwd, timeout=1800):
    p = subprocess.run(cmd, cwd=cwd, shell=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


def copy_tree(dst):
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=TOP,
                           stdout=subprocess.PIPE, text=True, check=True).stdout.split("\n")
    for f in files:
        if not f or not os.path.isfile(os.path.join(TOP, f)):
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, f)) or dst, exist_ok=True)
        shutil.copy2(os.path.join(TOP, f), os.path.join(dst, f))


def failed_tests(out):
    return re.findall(r"^\s*\d+ - (\S+) \(", out, re.M)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="also run the whole gcc ctest")
    ap.add_argument("--keep", help="scratch directory to use and keep")
    ap.add_argument("names", nargs="*", help="mutations to run (default: all)")
    a = ap.parse_args()
    chosen = [m for m in MUTATIONS if not a.names or m["name"] in a.names]
    if not chosen:
        print("mutations: no mutation matches %s" % a.names)
        return 1
    scratch = a.keep or tempfile.mkdtemp(prefix="sv-mutations-")
    os.makedirs(scratch, exist_ok=True)
    copy_tree(scratch)
    rc, out = sh("cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && "
                 "cmake --build build -j%d" % os.cpu_count(), scratch)
    if rc:
        print(out[-3000:])
        print("mutations: the unmutated tree does not build")
        return 1
    caught, missed = 0, []
    for m in chosen:
        if "patch" in m:
            # A unified diff (git apply) instead of one replacement.
            diff = os.path.join(TOP, m["patch"])
            rc, out = sh("git apply --check '%s'" % diff, scratch)
            if rc:
                print("STALE  %-28s %s does not apply: %s" % (m["name"], m["patch"], out))
                missed.append(m["name"])
                continue
            m["file"] = subprocess.run(
                "git apply --numstat '%s'" % diff, cwd=scratch, shell=True, text=True,
                stdout=subprocess.PIPE).stdout.split()[2]
            path = os.path.join(scratch, m["file"])
            orig = open(path).read()
            sh("git apply '%s'" % diff, scratch)
        else:
            path = os.path.join(scratch, m["file"])
            orig = open(path).read()
            n = orig.count(m["old"])
            if n != 1 and not (m.get("first") and n > 1):
                print("STALE  %-28s %s: the text to replace occurs %d times" %
                      (m["name"], m["file"], n))
                missed.append(m["name"])
                continue
            open(path, "w").write(orig.replace(m["old"], m["new"], 1))
        t0 = time.time()
        try:
            rc, out = sh("cmake --build build -j%d" % os.cpu_count(), scratch)
            if rc:
                print("BUILD  %-28s the mutated tree does not compile:\n%s" %
                      (m["name"], out[-2000:]))
                missed.append(m["name"])
                continue
            regex = m["tests"] if not a.full else "."
            env = " ".join("%s=%s" % kv for kv in m.get("env", {}).items())
            rc, out = sh("%s ctest --output-on-failure -j2 -R '%s'" % (env, regex),
                         os.path.join(scratch, "build"))
            fails = failed_tests(out)
            if rc and fails:
                caught += 1
                print("CAUGHT %-28s %5.0f s  by %s" % (m["name"], time.time() - t0,
                                                       ", ".join(fails)))
                why = [l for l in out.split("\n") if re.search(m.get("says", "$^"), l)]
                if m.get("says") and not why:
                    print("       (but no failure line matches %r)" % m["says"])
                for l in why[:3]:
                    print("       " + l.strip()[:200])
            else:
                missed.append(m["name"])
                print("MISSED %-28s %5.0f s  (%s: %s)" % (m["name"], time.time() - t0,
                      m["what"], "no test failed" if not rc else out[-500:]))
        finally:
            open(path, "w").write(orig)
    sh("cmake --build build -j%d" % os.cpu_count(), scratch)
    if not a.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    print("mutations: %d caught, %d missed%s" % (caught, len(missed),
          (": " + ", ".join(missed)) if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
