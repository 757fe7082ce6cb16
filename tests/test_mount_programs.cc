// Unmodified programs on an odafs-mount: each script runs once in a local directory and
// once on the mount, and both must print the same (cp -a, rsync -a, tar, ls -l, find, mv,
// rm -r, dd, sha256sum, sed -i and an editor-style save, make, git; trees with FIFOs,
// sockets and hard links). Skipped (with the
// reason) where FUSE cannot mount.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/support/mount_process.h"
#include "tests/support/server_process.h"

using odafs::test::MountProcess;
using odafs::test::read_local;
using odafs::test::ServerProcess;
using odafs::test::TempDir;
using odafs::test::write_local;

namespace {

#define MOUNT_TEST(name) ODAFS_MOUNT_TEST(name)

bool have(const char* program) {
  return std::system((std::string("command -v ") + program + " >/dev/null 2>&1").c_str()) == 0;
}

// A fixed tree to copy: files of several sizes and modes, a symlink, an empty file, nested
// directories, fixed times.
const char* kMakeTree = R"(
set -e
mkdir -p "$SRC/sub/deeper" "$SRC/empty-dir"
printf 'hello\n' > "$SRC/a.txt"
seq 1 60000 > "$SRC/numbers"
: > "$SRC/empty"
printf '#!/bin/sh\necho run\n' > "$SRC/run.sh"
printf 'deep\n' > "$SRC/sub/deeper/f"
head -c 100000 "$SRC/numbers" > "$SRC/sub/part"
ln -s a.txt "$SRC/link"
ln -s sub/deeper "$SRC/dirlink"
chmod 600 "$SRC/a.txt"; chmod 755 "$SRC/run.sh"; chmod 750 "$SRC/sub"
find "$SRC" -exec touch -h -d @1000000000.5 {} +
)";

// Runs `script` with bash in `dir` (env R=dir, SRC=src); returns "exit N" + its output,
// with `dir` replaced by "$R" so that runs in different places compare equal.
std::string run_in(const std::string& dir, const std::string& src, const std::string& script) {
  TempDir io;
  write_local(io / "script.sh", script);
  std::string cmd = "cd '" + dir + "' && R='" + dir + "' SRC='" + src +
                    "' LC_ALL=C timeout 60 bash -e '" + (io / "script.sh") + "' > '" +
                    (io / "out") + "' 2>&1";
  int status = std::system(cmd.c_str());
  std::string out = read_local(io / "out");
  for (size_t pos; (pos = out.find(dir)) != std::string::npos;) out.replace(pos, dir.size(), "$R");
  return "exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "\n" + out;
}

struct Compare {
  Compare() : server(exp.path()), m(server.url(), mnt.path()) {
    write_local(src / "mk.sh", kMakeTree);
    std::string tree = src / "tree";
    std::string cmd = "SRC='" + tree + "' bash '" + (src / "mk.sh") + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  // The script's output locally and on the mount.
  std::pair<std::string, std::string> both(const std::string& script) {
    return {run_in(local.path(), src / "tree", script), run_in(mnt.path(), src / "tree", script)};
  }
  TempDir src, local, exp, mnt;
  ServerProcess server;
  MountProcess m;
};

}  // namespace

MOUNT_TEST("cp -a, tar c and x, ls -l, find, sha256sum, mv, rm -r: as on a local directory") {
  Compare c;
  auto [local, mounted] = c.both(R"(
cp -a "$SRC" copy
echo '# find'
(cd copy && find . -printf '%y %m %p -> %l\n' | sort)
(cd copy && find . -type f -printf '%s %p\n' | sort)
echo '# times (cp -a keeps them, of symlinks too)'
(cd copy && find . -printf '%T@ %p\n' | sort)
echo '# sha256sum'
(cd copy && find . -type f -print0 | sort -z | xargs -0 sha256sum)
echo '# ls -l'
ls -l --time-style=+%s copy copy/sub | grep -v '^total'
echo '# tar'
tar -C copy -cf copy.tar .
tar -tvf copy.tar | awk '{ $4 = ""; $5 = ""; print }' | sort
mkdir untar
tar -C untar -xf copy.tar
(cd untar && find . -printf '%y %m %p -> %l\n' | sort)
(cd untar && find . -type f -print0 | sort -z | xargs -0 sha256sum)
diff -r copy untar && echo same
echo '# mv'
mv copy/a.txt copy/sub/renamed.txt
mv copy/sub copy/sub2
mv untar moved
mv copy/numbers moved/numbers
find . -path ./copy.tar -prune -o -printf '%y %p\n' | sort
cat copy/sub2/renamed.txt
echo '# rm -r'
rm -r copy moved
ls -A
)");
  CHECK(mounted == local);
  CHECK(local.rfind("exit 0\n", 0) == 0);
}

MOUNT_TEST("rsync -a: a copy, a run with nothing to do, changes with --delete" *
           doctest::skip(!have("rsync")) * doctest::description("needs rsync")) {
  Compare c;
  auto [local, mounted] = c.both(R"(
rsync -a "$SRC"/ src/
rsync -a src/ copy/
echo '# find'
(cd copy && find . -printf '%y %m %s %u:%g %p -> %l\n' | sort)
echo '# times (of symlinks too)'
(cd copy && find . -printf '%T@ %p\n' | sort)
echo '# sha256sum'
(cd copy && find . -type f -print0 | sort -z | xargs -0 sha256sum)
diff -r src copy && echo same
echo '# a second run has nothing to copy'
rsync -ai src/ copy/
echo '# a change, a removal, --delete'
printf 'changed\n' > src/a.txt
touch -d @1000000100 src/a.txt
rm src/sub/part
rsync -ai --delete src/ copy/
cat copy/a.txt
ls -A copy/sub
(cd copy && find . ! -path ./sub -printf '%T@ %m %p\n' | sort)
kept=$(stat -c %Y src/sub) now=$(stat -c %Y copy/sub)
[ "$kept" = "$now" ] && echo 'sub: time kept' || echo "sub: time $now, not $kept"
rsync -a --checksum src/ copy/ && diff -r src copy && echo same
)");
  CHECK(mounted == local);
  CHECK(local.rfind("exit 0\n", 0) == 0);
}

MOUNT_TEST("a tree with a FIFO, a socket and hard links: rsync -a, tar and cp -a keep them" *
           doctest::skip(!have("rsync")) * doctest::description("needs rsync")) {
  Compare c;
  const std::string tree = c.src / "tree";
  REQUIRE(mkfifo((tree + "/pipe").c_str(), 0640) == 0);
  REQUIRE(mkfifo((tree + "/sub/pipe2").c_str(), 0600) == 0);
  {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string sock = tree + "/sock";
    REQUIRE(sock.size() < sizeof addr.sun_path);
    std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    close(fd);
    REQUIRE(chmod(sock.c_str(), 0755) == 0);  // whatever this process's umask
  }
  REQUIRE(chmod((tree + "/pipe").c_str(), 0640) == 0);
  REQUIRE(link((tree + "/a.txt").c_str(), (tree + "/sub/hard.txt").c_str()) == 0);
  auto [local, mounted] = c.both(R"(
rsync -aH "$SRC"/ copy/
echo '# rsync -aH: types, modes, links'
(cd copy && find . -printf '%y %m %n %p\n' | sort)
echo '# tar of the copy, extracted (tar leaves sockets out: it says so)'
tar -C copy -cf t.tar . 2>&1 | sed 's/^tar: //'
mkdir x && tar -C x -xf t.tar
(cd x && find . -printf '%y %m %n %p\n' | sort)
echo '# cp -a of the copy'
cp -a copy again
(cd again && find . -printf '%y %m %n %p\n' | sort)
echo '# the FIFO works where it landed'
(printf 'through\n' > again/pipe &) ; read -r line < again/pipe; echo "$line"
rm -r copy x again t.tar
ls -A
)");
  CHECK(mounted == local);
  CHECK(local.rfind("exit 0\n", 0) == 0);
  CHECK(local.find("p 640 1 ./pipe") != std::string::npos);
  CHECK(local.find("s 755 1 ./sock") != std::string::npos);
}

MOUNT_TEST("dd, sparse dd, sed -i and an editor-style save (temp file, rename over)") {
  Compare c;
  auto [local, mounted] = c.both(R"(
dd if="$SRC/numbers" of=copy bs=4096 status=none
dd if=copy bs=1000 skip=3 count=5 status=none | sha256sum
dd if=/dev/zero of=sparse bs=1 count=1 seek=5000000 status=none
stat -c '%s' sparse
sha256sum copy sparse
dd if="$SRC/numbers" of=copy bs=512 seek=3 count=2 conv=notrunc status=none
sha256sum copy
echo '# sed -i'
printf 'alpha\nbeta\n' > doc.txt
chmod 640 doc.txt
sed -i 's/beta/gamma/' doc.txt
cat doc.txt
stat -c '%a %s' doc.txt
echo '# save: write a temp file, fsync, rename over'
printf 'version 1\n' > note
exec 3<note
printf 'version 2, longer\n' > .note.swp
sync .note.swp
mv -f .note.swp note
cat note
echo '# the old file, held open, reads on'
cat <&3
exec 3<&-
# (odafs-mount keeps it as .odafs-hidden-* until the RELEASE that follows close)
ls -A | grep -v '^\.odafs-hidden-'
)");
  CHECK(mounted == local);
  CHECK(local.rfind("exit 0\n", 0) == 0);
}

MOUNT_TEST("make builds a small C project, and rebuilds what a changed header needs") {
  Compare c;
  auto [local, mounted] = c.both(R"(
mkdir proj && cd proj
cat > util.h <<'EOF'
int twice(int x);
EOF
cat > util.c <<'EOF'
#include "util.h"
int twice(int x) { return 2 * x; }
EOF
cat > main.c <<'EOF'
#include <stdio.h>
#include "util.h"
int main(void) { printf("%d\n", twice(21)); return 0; }
EOF
printf 'prog: main.o util.o\n\tcc -o prog main.o util.o\n%%.o: %%.c util.h\n\tcc -c -o $@ $<\nclean:\n\trm -f prog *.o\n' > Makefile
make
./prog
make -q && echo up-to-date
sleep 0.05
touch util.h
make -q || echo stale
make
./prog
make clean
ls -A
)");
  CHECK(mounted == local);
  CHECK(local.rfind("exit 0\n", 0) == 0);
}

MOUNT_TEST("git init, add, commit, log, status" * doctest::skip(!have("git")) *
           doctest::description("needs git")) {
  Compare c;
  auto [local, mounted] = c.both(R"(
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t
export GIT_COMMITTER_EMAIL=t@example.com GIT_AUTHOR_DATE='2001-09-09T01:46:40Z'
export GIT_COMMITTER_DATE='2001-09-09T01:46:40Z' HOME="$R"
git init -q -b main repo
cd repo
cp -a "$SRC"/. .
git add .
git commit -q -m first
echo more >> a.txt
git mv numbers numbers.txt
git commit -q -am second
git log --format='%H %s'
git status --porcelain
git show --stat --format=%s HEAD | cat
git fsck --no-progress 2>&1 && echo fsck-ok
git gc -q && git count-objects -v | grep -v size
git cat-file -p HEAD:a.txt
)");
  CHECK(mounted == local);
  CHECK(local.rfind("exit 0\n", 0) == 0);
}
