// Paths of loadFile/saveFile: lexical confinement, opening beneath a
// directory, and files that appear whole or not at all.

#include "server/confined_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace tensord::server {
namespace {
namespace fs = std::filesystem;

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ConfinePath, RelativePathsFollowTheFirstDirectory) {
  const std::vector<fs::path> dirs = {"/srv/ckpt/", "/data"};
  ConfinedPath p = confinePath(dirs, "a/./b/../m.safetensors");
  EXPECT_EQ(p.dir, "/srv/ckpt");
  EXPECT_EQ(p.relative, "a/m.safetensors");
  EXPECT_EQ(p.full(), "/srv/ckpt/a/m.safetensors");
}

TEST(ConfinePath, AbsolutePathsMustLieInsideADirectory) {
  const std::vector<fs::path> dirs = {"/srv/ckpt", "/data"};
  ConfinedPath p = confinePath(dirs, "/data/x/m.safetensors");
  EXPECT_EQ(p.dir, "/data");
  EXPECT_EQ(p.relative, "x/m.safetensors");
  EXPECT_EQ(errorOf([&] { confinePath(dirs, "/etc/passwd"); }),
            "path '/etc/passwd' is outside the directories the daemon may use (files.dirs: /srv/ckpt, /data)");
  // A name that only starts like a directory is not inside it.
  EXPECT_NE(errorOf([&] { confinePath(dirs, "/srv/ckpt2/m"); }).find("is outside"), std::string::npos);
  EXPECT_NE(errorOf([&] { confinePath(dirs, "/srv/ckpt/../etc/m"); }).find("is outside"), std::string::npos);
}

TEST(ConfinePath, RefusesWhatIsNoFileInsideTheDirectory) {
  const std::vector<fs::path> dirs = {"/srv/ckpt"};
  EXPECT_EQ(errorOf([&] { confinePath(dirs, "../x"); }),
            "path '../x' leads out of '/srv/ckpt' (files.dirs) through '..'");
  EXPECT_NE(errorOf([&] { confinePath(dirs, "a/../../x"); }).find("through '..'"), std::string::npos);
  EXPECT_NE(errorOf([&] { confinePath(dirs, "/srv/ckpt"); }).find("names a directory"), std::string::npos);
  EXPECT_NE(errorOf([&] { confinePath(dirs, "sub/"); }).find("names a directory, not a file"), std::string::npos);
  EXPECT_NE(errorOf([&] { confinePath(dirs, "."); }).find("names a directory"), std::string::npos);
  EXPECT_EQ(errorOf([&] { confinePath(dirs, ""); }), "expected a file path, got an empty one");
  EXPECT_EQ(errorOf([&] { confinePath(dirs, std::string("a\0b", 3)); }), "the path contains a NUL byte");
  EXPECT_EQ(errorOf([&] { confinePath({}, "x"); }),
            "server-side files are off: the daemon's config lists no directories under files.dirs");
}

class ConfinedFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tensord-confined-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "allowed" / "sub");
    std::ofstream(root_ / "secret") << "secret";
    std::ofstream(root_ / "allowed" / "sub" / "in") << "inside";
  }
  void TearDown() override { fs::remove_all(root_); }

  ConfinedPath path(const std::string& relative) const { return confinePath({root_ / "allowed"}, relative); }
  std::string read(const std::string& relative) const {
    UniqueFd fd = openForRead(path(relative));
    char buf[64];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    return std::string(buf, size_t(std::max<ssize_t>(n, 0)));
  }

  fs::path root_;
};

TEST_F(ConfinedFiles, SymlinksAreFollowedOnlyWhileTheyStayInside) {
  fs::create_symlink("sub/in", root_ / "allowed" / "link_in");
  fs::create_symlink("../secret", root_ / "allowed" / "link_out");
  fs::create_symlink(root_, root_ / "allowed" / "dir_out");
  EXPECT_EQ(read("link_in"), "inside");
  EXPECT_NE(errorOf([&] { read("link_out"); }).find("through a symbolic link"), std::string::npos);
  EXPECT_NE(errorOf([&] { read("dir_out/secret"); }).find("through a symbolic link"), std::string::npos);
  EXPECT_NE(errorOf([&] { read("sub"); }).find("is not a regular file"), std::string::npos);
  ASSERT_EQ(::mkfifo((root_ / "allowed" / "fifo").c_str(), 0600), 0);
  EXPECT_NE(errorOf([&] { read("fifo"); }).find("is not a regular file"), std::string::npos);  // and no hang
}

TEST_F(ConfinedFiles, WithoutOpenat2NoSymlinkIsFollowed) {
  fs::create_symlink("sub/in", root_ / "allowed" / "link_in");
  fs::create_symlink("sub", root_ / "allowed" / "dir_link");
  UniqueFd fd = openNoSymlinks(path("sub/in"), O_RDONLY);
  EXPECT_GE(fd.get(), 0);
  EXPECT_NE(errorOf([&] { openNoSymlinks(path("link_in"), O_RDONLY); }).find("goes through a symbolic link"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { openNoSymlinks(path("dir_link/in"), O_RDONLY); }).find("goes through a symbolic link"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { openNoSymlinks(path("sub/in/x"), O_RDONLY); }).find("Not a directory"), std::string::npos);
}

TEST_F(ConfinedFiles, APendingFileAppearsOnlyOnCommit) {
  {
    PendingFile file(path("sub/new"));
    file.create();
    file.writeAt("hello", 5, 0);
    EXPECT_FALSE(fs::exists(root_ / "allowed" / "sub" / "new"));
    file.commit(/*overwrite=*/false);
  }
  EXPECT_EQ(slurp(root_ / "allowed" / "sub" / "new"), "hello");
  {
    PendingFile again(path("sub/new"));
    again.create();
    again.writeAt("x", 1, 0);
    EXPECT_NE(errorOf([&] { again.commit(false); }).find("exists (overwrite was not asked for)"), std::string::npos);
  }
  {
    PendingFile abandoned(path("sub/other"));
    abandoned.create();
    abandoned.writeAt("y", 1, 0);
  }  // never committed: its temporary file goes
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root_ / "allowed" / "sub")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"in", "new"}));
  EXPECT_EQ(slurp(root_ / "allowed" / "sub" / "new"), "hello");
  EXPECT_NE(errorOf([&] { PendingFile(path("missing/x")).create(); }).find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace tensord::server
