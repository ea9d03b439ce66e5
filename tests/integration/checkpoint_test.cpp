// Checkpoints in safetensors against a real daemon: Session.loadFile and
// saveFile (the daemon's own disk, confined to files.dirs), tensorctl load,
// save, put and get, and the state directory across restarts. Files are
// checked against an independent numpy reader and writer
// (tests/scripts/safetensors_np.py) in both directions.

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/integration/daemon_test.h"
#include "tests/integration/policy_daemon_test.h"
#include "tests/integration/process.h"

namespace tensord::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exitCode) + (r.timedOut ? " (timed out)" : "") + "\nstdout: " + r.out +
         "\nstderr: " + r.err;
}

// Runs the numpy side; returns its manifest (see the script's doc).
json numpySide(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/python3",
                                   (fs::path(TENSORD_SOURCE_DIR) / "tests/scripts/safetensors_np.py").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = runCommand(argv);
  if (r.exitCode != 0) throw std::runtime_error("safetensors_np.py: " + describe(r));
  return json::parse(r.out);
}

std::string sha256Of(const std::vector<std::byte>& bytes) {
  return sha256Hex(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::string fileDType(DType dtype) {
  static const std::map<DType, std::string> names = {{DType::F32, "F32"},  {DType::F16, "F16"}, {DType::BF16, "BF16"},
                                                     {DType::I32, "I32"},  {DType::I64, "I64"}, {DType::U8, "U8"},
                                                     {DType::Bool, "BOOL"}};
  return names.at(dtype);
}

void writeBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// An 8-byte little-endian length and the JSON, as a hand-made header.
std::string withPrefix(const std::string& header, uint64_t length) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((length >> (8 * i)) & 0xff);
  return out + header;
}
std::string withPrefix(const std::string& header) { return withPrefix(header, header.size()); }

// A tensor the test makes, with bytes it knows.
struct Known {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<std::byte> bytes;
};

std::vector<Known> knownTensors() {
  std::mt19937 rng(7);
  auto make = [&](std::string name, DType dtype, Shape shape) {
    uint64_t n = dtypeSize(dtype);
    for (int64_t d : shape) n *= uint64_t(d);
    std::vector<std::byte> bytes(n);
    for (auto& b : bytes) b = std::byte(dtype == DType::Bool ? rng() % 2 : rng() % 256);
    return Known{std::move(name), dtype, std::move(shape), std::move(bytes)};
  };
  return {make("w/f32", DType::F32, {4, 3}), make("w/f16", DType::F16, {5}),    make("w/bf16", DType::BF16, {2, 2, 2}),
          make("w/i32", DType::I32, {3}),    make("w/i64", DType::I64, {2, 2}), make("w/u8", DType::U8, {17}),
          make("w/bool", DType::Bool, {6}),  make("w/scalar", DType::F32, {}),  make("w/empty", DType::I64, {0, 3})};
}

// A scratch directory that outlives daemon restarts: files/ (the config's
// files.dirs) and state/ (its state_dir).
class Scratch {
 public:
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "tensord-ckpt-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root = tmpl;
    fs::create_directories(files());
    fs::create_directories(state());
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  fs::path files() const { return root / "files"; }
  fs::path state() const { return root / "state"; }

  fs::path root;
};

// Small staging slots, so that a file of a few hundred KiB moves in many pieces.
constexpr uint64_t kSlotBytes = 65536;

DaemonOptions checkpointOptions(const Scratch& scratch, bool files = true) {
  DaemonOptions options;
  options.extra = {{"state_dir", scratch.state().string()}, {"staging", {{"slot_bytes", kSlotBytes}, {"slots", 4}}}};
  if (files) options.extra["files"] = {{"dirs", {scratch.files().string()}}};
  return options;
}

// Daemons started and stopped by the test itself (restarts on one state dir).
class CheckpointTest : public ::testing::Test {
 protected:
  std::unique_ptr<DaemonProcess> start(bool files = true) {
    auto daemon = std::make_unique<DaemonProcess>(checkpointOptions(scratch_, files));
    logs_.push_back(daemon.get());
    return daemon;
  }
  // SIGTERM; a clean stop (exit status 0) is part of every test.
  void stop(std::unique_ptr<DaemonProcess>& daemon) {
    auto status = daemon->stop();
    ASSERT_TRUE(status.has_value()) << daemon->log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describeStatus(*status) << "; log:\n"
                                                                 << daemon->log();
    if (HasFailure()) std::cerr << "---- tensord log ----\n" << daemon->log() << "---- end of log ----\n";
    logs_.erase(std::find(logs_.begin(), logs_.end(), daemon.get()));
    daemon.reset();
  }
  void TearDown() override {
    if (HasFailure()) {
      for (auto* d : logs_) std::cerr << "---- tensord log ----\n" << d->log() << "---- end of log ----\n";
    }
  }
  static std::unique_ptr<Client> connect(DaemonProcess& d) {
    return std::make_unique<Client>(ConnectOptions{.address = d.address(), .token = d.token()});
  }
  static std::string errorOf(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  CommandResult ctl(DaemonProcess& d, std::vector<std::string> args) {
    std::vector<std::string> argv = {(buildDir() / "client" / "tensorctl").string(), "--connect", d.address(),
                                     "--token", d.token()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runCommand(argv, {{"TENSORD_ADDR", std::nullopt}, {"TENSORD_TOKEN", std::nullopt}});
  }

  static void uploadKnown(Client& client, const std::vector<Known>& tensors) {
    for (const auto& t : tensors) client.upload(t.dtype, t.shape, t.bytes).save(t.name, true);
  }
  // Each tensor's bytes and description as the daemon holds them.
  static void expectHolds(Client& client, const std::vector<Known>& tensors, const std::string& prefix = {}) {
    for (const auto& t : tensors) {
      Tensor x = client.restore(prefix + t.name);
      TensorInfo info = x.info();
      EXPECT_EQ(info.dtype, t.dtype) << t.name;
      EXPECT_EQ(info.shape, t.shape) << t.name;
      EXPECT_EQ(x.bytes(), t.bytes) << t.name << ": bytes differ";
    }
  }
  // What the numpy reader finds in `file`, against the tensors written.
  static void expectNumpyReads(const fs::path& file, const std::vector<Known>& tensors, const std::string& strip = {}) {
    json read = numpySide({"read", file.string()});
    ASSERT_EQ(read["tensors"].size(), tensors.size()) << read.dump();
    for (const auto& t : tensors) {
      const std::string name = t.name.substr(strip.size());
      ASSERT_TRUE(read["tensors"].contains(name)) << name << " missing from " << read.dump();
      const json& entry = read["tensors"][name];
      EXPECT_EQ(entry["dtype"], fileDType(t.dtype)) << name;
      EXPECT_EQ(entry["shape"].get<Shape>(), t.shape) << name;
      EXPECT_EQ(entry["sha256"], sha256Of(t.bytes)) << name;
    }
  }

  Scratch scratch_;
  std::vector<DaemonProcess*> logs_;
};

TEST_F(CheckpointTest, NumpyWrittenFileLoadsBitExactInEveryDtype) {
  const json written = numpySide({"write", (scratch_.files() / "np.safetensors").string()});
  auto daemon = start();
  {
    auto client = connect(*daemon);
    const FileTransfer loaded = client->loadFile("np.safetensors", "np/");
    EXPECT_EQ(loaded.path, (scratch_.files() / "np.safetensors").string());
    ASSERT_EQ(loaded.tensors.size(), written["tensors"].size());
    for (const auto& [name, entry] : written["tensors"].items()) {
      Tensor x = client->restore("np/" + name);
      const TensorInfo info = x.info();
      EXPECT_EQ(fileDType(info.dtype), entry["dtype"]) << name;
      EXPECT_EQ(info.shape, entry["shape"].get<Shape>()) << name;
      EXPECT_EQ(info.owner, daemon->principal()) << name;
      EXPECT_EQ(sha256Of(x.bytes()), entry["sha256"]) << name;
    }
  }
  stop(daemon);
}

TEST_F(CheckpointTest, SavedFileReadsBitExactInNumpyAndLoadsBack) {
  const auto tensors = knownTensors();
  auto daemon = start();
  {
    auto client = connect(*daemon);
    uploadKnown(*client, tensors);
    // Every tensor under w/, named in the file without the prefix.
    const FileTransfer saved = client->saveFile("model.safetensors", {}, "w/");
    EXPECT_EQ(saved.path, (scratch_.files() / "model.safetensors").string());
    EXPECT_EQ(saved.tensors.size(), tensors.size());
    EXPECT_EQ(saved.bytes, fs::file_size(scratch_.files() / "model.safetensors"));
    expectNumpyReads(scratch_.files() / "model.safetensors", tensors, "w/");

    // Named ones only, under their names relative to the prefix.
    const FileTransfer two = client->saveFile("two.safetensors", {"f32", "bool"}, "w/");
    ASSERT_EQ(two.tensors.size(), 2u);
    const json read = numpySide({"read", (scratch_.files() / "two.safetensors").string()});
    EXPECT_EQ(read["tensors"].size(), 2u) << read.dump();
    EXPECT_TRUE(read["tensors"].contains("f32") && read["tensors"].contains("bool")) << read.dump();

    // Loading it back under another prefix gives the same bytes.
    const FileTransfer loaded = client->loadFile("model.safetensors", "copy/");
    EXPECT_EQ(loaded.tensors.size(), tensors.size());
    std::vector<Known> copies = tensors;
    for (auto& t : copies) t.name = "copy/" + t.name.substr(2);
    expectHolds(*client, copies);

    // No file is replaced unless asked; nothing is left behind either way.
    EXPECT_NE(errorOf([&] { client->saveFile("two.safetensors", {"u8"}, "w/"); }).find("exists"), std::string::npos);
    EXPECT_EQ(numpySide({"read", (scratch_.files() / "two.safetensors").string()})["tensors"].size(), 2u);
    client->saveFile("two.safetensors", {"u8"}, "w/", /*overwrite=*/true);
    EXPECT_EQ(numpySide({"read", (scratch_.files() / "two.safetensors").string()})["tensors"].size(), 1u);
    for (const auto& entry : fs::directory_iterator(scratch_.files())) {
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
    }
  }
  stop(daemon);
}

TEST_F(CheckpointTest, HostileFilesAreRefusedAndLoadNothing) {
  const std::string okEntry = R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  struct Case {
    const char* file;
    std::string bytes;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"truncated.safetensors", withPrefix("{" + okEntry + "}") + "ab", "reach past the data section"},
      {"cut_header.safetensors", withPrefix("{" + okEntry + "}").substr(0, 30), "reaches past the end of the file"},
      {"overlap.safetensors",
       withPrefix(
           R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})") +
           "abcdef",
       "tensor 'b': data_offsets [2, 6] overlap tensor 'a'"},
      {"lying.safetensors",
       withPrefix(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})") + std::string(20, 'x'),
       "tensor 'w': shape [2, 3] of F32 needs 24 bytes; data_offsets [0, 20] hold 20"},
      {"huge_header.safetensors", withPrefix("{}", uint64_t(1) << 40), "exceeds the limit of 100000000 bytes"},
      {"unknown_dtype.safetensors", withPrefix(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})") + "x",
       "tensor 'a': dtype \"Q7\" is not one tensord can hold"},
      {"gap.safetensors",
       withPrefix(
           R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})") +
           "abcdef",
       "data bytes [2, 4) belong to no tensor"},
      {"garbage.safetensors", withPrefix("{\"a\": [1, 2,, }") + "xxxx", "the header is not valid JSON"},
      {"not_json_object.safetensors", withPrefix("[1]"), "not a JSON object"},
      {"empty.safetensors", "", "a safetensors file starts with an 8-byte header length"},
      // Valid as a file, but one name is not a tensor name: the good tensor is not loaded either.
      {"bad_name.safetensors",
       withPrefix(
           R"({"ok":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"bad name":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})") +
           "abcd",
       "tensor 'bad name': tensor name 'h/bad name' has a character outside"},
  };
  for (const auto& c : cases) writeBytes(scratch_.files() / c.file, c.bytes);
  auto daemon = start();
  {
    auto client = connect(*daemon);
    const uint64_t liveBefore = client->info().memory.liveBytes;
    for (const auto& c : cases) {
      const std::string message = errorOf([&] { client->loadFile(c.file, "h/"); });
      EXPECT_NE(message.find("loadFile: " + (scratch_.files() / c.file).string()), std::string::npos)
          << c.file << ": " << message;
      EXPECT_NE(message.find(c.expected), std::string::npos) << c.file << ": " << message;
    }
    // Nothing was named, nothing is held, and the daemon serves on.
    EXPECT_TRUE(client->list().empty());
    EXPECT_EQ(client->info().memory.liveBytes, liveBefore);
    writeBytes(scratch_.files() / "good.safetensors", withPrefix("{" + okEntry + "}") + "abcd");
    EXPECT_EQ(client->loadFile("good.safetensors", "h/").tensors.size(), 1u);
  }
  stop(daemon);
}

TEST_F(CheckpointTest, PathsStayInsideTheConfiguredDirectories) {
  const std::string file = withPrefix(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})") + "ab";
  writeBytes(scratch_.root / "outside.safetensors", file);
  fs::create_directories(scratch_.root / "outdir");
  writeBytes(scratch_.root / "outdir" / "x.safetensors", file);
  writeBytes(scratch_.files() / "real.safetensors", file);
  fs::create_symlink(scratch_.root / "outside.safetensors", scratch_.files() / "link_out.safetensors");
  fs::create_symlink("../outside.safetensors", scratch_.files() / "relative_out.safetensors");
  fs::create_symlink(scratch_.root / "outdir", scratch_.files() / "dir_out");
  fs::create_symlink("real.safetensors", scratch_.files() / "link_in.safetensors");
  auto daemon = start();
  {
    auto client = connect(*daemon);
    auto loadError = [&](const std::string& path) { return errorOf([&] { client->loadFile(path); }); };
    EXPECT_NE(loadError("../outside.safetensors")
                  .find("leads out of '" + scratch_.files().string() + "' (files.dirs) through '..'"),
              std::string::npos);
    EXPECT_NE(loadError("sub/../../outside.safetensors").find("through '..'"), std::string::npos);
    const std::string outside = loadError((scratch_.root / "outside.safetensors").string());
    EXPECT_NE(
        outside.find("is outside the directories the daemon may use (files.dirs: " + scratch_.files().string() + ")"),
        std::string::npos)
        << outside;
    EXPECT_NE(loadError((scratch_.files() / ".." / "outside.safetensors").string()).find("is outside"),
              std::string::npos);
    for (const char* link : {"link_out.safetensors", "relative_out.safetensors", "dir_out/x.safetensors"}) {
      const std::string message = loadError(link);
      EXPECT_NE(message.find("leads outside '" + scratch_.files().string() + "' (files.dirs) through a symbolic link"),
                std::string::npos)
          << link << ": " << message;
    }
    EXPECT_NE(loadError("missing.safetensors").find("No such file"), std::string::npos);
    EXPECT_NE(loadError(".").find("names a directory"), std::string::npos);
    EXPECT_TRUE(client->list().empty());

    // A link that stays inside is followed; an absolute path inside is fine.
    EXPECT_EQ(client->loadFile("link_in.safetensors", "in/").tensors.size(), 1u);
    EXPECT_EQ(client->loadFile((scratch_.files() / "real.safetensors").string(), "abs/").tensors.size(), 1u);

    // Saving is confined the same way, and writes nothing outside.
    EXPECT_NE(errorOf([&] { client->saveFile("../escaped.safetensors"); }).find("through '..'"), std::string::npos);
    EXPECT_NE(errorOf([&] { client->saveFile("dir_out/escaped.safetensors"); }).find("through a symbolic link"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(scratch_.root / "escaped.safetensors"));
    EXPECT_FALSE(fs::exists(scratch_.root / "outdir" / "escaped.safetensors"));
    // Saving over a symlink replaces the link, never the file it points to.
    client->saveFile("link_out.safetensors", {}, "in/", /*overwrite=*/true);
    EXPECT_FALSE(fs::is_symlink(scratch_.files() / "link_out.safetensors"));
    EXPECT_EQ(readBytes(scratch_.root / "outside.safetensors"), file);
  }
  stop(daemon);

  // Without files.dirs the daemon reads and writes no user files at all.
  auto closed = start(/*files=*/false);
  {
    auto client = connect(*closed);
    for (const std::string& message : {errorOf([&] { client->loadFile("real.safetensors"); }),
                                       errorOf([&] { client->saveFile("x.safetensors"); })}) {
      EXPECT_NE(message.find("server-side files are off: the daemon's config lists no directories under files.dirs"),
                std::string::npos)
          << message;
    }
  }
  stop(closed);
}

TEST_F(CheckpointTest, AFileOfManyStagingSlotsStreamsWithProgress) {
  constexpr int64_t n = 300'000;  // 1.2 MB: about 18 slots of 64 KiB
  const json written = numpySide({"big", (scratch_.files() / "big.safetensors").string(), std::to_string(n)});
  auto daemon = start();
  {
    auto client = connect(*daemon);
    std::vector<std::pair<uint64_t, uint64_t>> updates;
    const auto progress = [&](uint64_t done, uint64_t total) { updates.emplace_back(done, total); };
    const FileTransfer loaded = client->loadFile("big.safetensors", "", false, progress);
    ASSERT_EQ(loaded.tensors.size(), 1u);
    const uint64_t bytes = uint64_t(n) * 4;
    EXPECT_EQ(loaded.bytes, bytes);
    EXPECT_EQ(sha256Of(client->restore("big").bytes()), written["tensors"]["big"]["sha256"]);

    // Several updates, never backwards, ending at the whole file.
    ASSERT_GE(updates.size(), 2u);
    for (size_t i = 0; i < updates.size(); ++i) {
      EXPECT_EQ(updates[i].second, bytes);
      EXPECT_GE(updates[i].first, i > 0 ? updates[i - 1].first : 0) << "update " << i;
    }
    EXPECT_EQ(updates.back().first, bytes);

    // And back out through the same slots.
    updates.clear();
    const FileTransfer saved = client->saveFile("big2.safetensors", {"big"}, "", false, progress);
    ASSERT_GE(updates.size(), 2u);
    EXPECT_EQ(updates.back(), std::make_pair(bytes, bytes));
    EXPECT_EQ(numpySide({"read", saved.path})["tensors"]["big"]["sha256"], written["tensors"]["big"]["sha256"]);
  }
  stop(daemon);
}

TEST_F(CheckpointTest, TensorctlLoadSavePutAndGet) {
  numpySide({"write", (scratch_.files() / "np.safetensors").string()});
  auto daemon = start();
  auto load = ctl(*daemon, {"load", "np.safetensors", "--prefix", "m/", "--json"});
  ASSERT_EQ(load.exitCode, 0) << describe(load);
  json loaded = json::parse(load.out);
  EXPECT_EQ(loaded["path"], (scratch_.files() / "np.safetensors").string());
  EXPECT_EQ(loaded["tensors"].size(), 10u) << load.out;

  auto save = ctl(*daemon, {"save", "again.safetensors", "--prefix", "m/"});
  ASSERT_EQ(save.exitCode, 0) << describe(save);
  EXPECT_NE(save.out.find("saved 10 tensors"), std::string::npos) << save.out;
  const json original = numpySide({"read", (scratch_.files() / "np.safetensors").string()});
  EXPECT_EQ(numpySide({"read", (scratch_.files() / "again.safetensors").string()})["tensors"], original["tensors"]);

  // get writes a local file from tensors: a group NAME/ without its prefix...
  const fs::path local = scratch_.root / "local.safetensors";
  auto get = ctl(*daemon, {"get", "m", local.string()});
  ASSERT_EQ(get.exitCode, 0) << describe(get);
  EXPECT_EQ(numpySide({"read", local.string()})["tensors"], original["tensors"]);
  // ...and put is its inverse: each tensor T becomes NAME/T.
  auto put = ctl(*daemon, {"put", "p", local.string(), "--json"});
  ASSERT_EQ(put.exitCode, 0) << describe(put);
  const fs::path roundTrip = scratch_.root / "round.safetensors";
  ASSERT_EQ(ctl(*daemon, {"get", "p", roundTrip.string()}).exitCode, 0);
  EXPECT_EQ(numpySide({"read", roundTrip.string()})["tensors"], original["tensors"]);
  // Several names: each tensor under its own name.
  const fs::path some = scratch_.root / "some.safetensors";
  auto getSome = ctl(*daemon, {"get", "m/f32", "p/i64", some.string()});
  ASSERT_EQ(getSome.exitCode, 0) << describe(getSome);
  const json someRead = numpySide({"read", some.string()});
  EXPECT_EQ(someRead["tensors"]["m/f32"], original["tensors"]["f32"]);
  EXPECT_EQ(someRead["tensors"]["p/i64"], original["tensors"]["i64"]);

  // A broken local file is a local file error (4); nothing is uploaded.
  writeBytes(scratch_.root / "broken.safetensors", withPrefix("{oops"));
  auto broken = ctl(*daemon, {"put", "b", (scratch_.root / "broken.safetensors").string()});
  EXPECT_EQ(broken.exitCode, 4) << describe(broken);
  EXPECT_NE(broken.err.find("the header is not valid JSON"), std::string::npos) << broken.err;
  auto missing = ctl(*daemon, {"get", "nothing", (scratch_.root / "n.safetensors").string()});
  EXPECT_EQ(missing.exitCode, 1) << describe(missing);
  EXPECT_NE(missing.err.find("no tensor named 'nothing' and none under 'nothing/'"), std::string::npos) << missing.err;
  auto severalNpy = ctl(*daemon, {"get", "a", "b", "c.npy"});
  EXPECT_EQ(severalNpy.exitCode, 2) << describe(severalNpy);
  auto refused = ctl(*daemon, {"load", "/etc/passwd"});
  EXPECT_EQ(refused.exitCode, 1) << describe(refused);
  EXPECT_NE(refused.err.find("is outside the directories the daemon may use"), std::string::npos) << refused.err;
  stop(daemon);
}

TEST_F(CheckpointTest, NamedTensorsSurviveARestartBitExact) {
  const auto tensors = knownTensors();
  auto first = start();
  {
    auto client = connect(*first);
    uploadKnown(*client, tensors);
    client->restore("w/f32").save("alias/f32");  // a second name for one tensor
    client->upload(DType::F32, {1}, std::as_bytes(std::span<const float>(std::vector<float>{1}))).wait();  // unnamed
  }
  stop(first);
  // The state file is plain safetensors: the numpy reader takes it.
  const fs::path stateFile = scratch_.state() / "tensors.safetensors";
  const json read = numpySide({"read", stateFile.string()});
  EXPECT_EQ(read["tensors"].size(), tensors.size()) << read.dump();  // each tensor once
  EXPECT_EQ(read["metadata"]["format"], "tensord-state-1");
  EXPECT_EQ(read["metadata"]["owner:w/i32"], "tester");
  EXPECT_EQ(read["metadata"]["alias:w/f32"], "alias/f32");  // stored once, under its first name

  auto second = start();
  {
    auto client = connect(*second);
    expectHolds(*client, tensors);
    const auto listed = client->list();
    EXPECT_EQ(listed.size(), tensors.size() + 1);  // the alias too, not the unnamed one
    for (const auto& info : listed) EXPECT_EQ(info.owner, "tester") << info.name;
    EXPECT_EQ(client->restore("alias/f32").info().id, client->restore("w/f32").info().id);
  }
  stop(second);
  // Saved again unchanged: the same bytes on disk.
  const std::string before = readBytes(stateFile);
  auto third = start();
  stop(third);
  EXPECT_EQ(readBytes(stateFile), before);
}

TEST_F(CheckpointTest, KillDuringOrBeforeASaveLeavesThePreviousSet) {
  const auto tensors = knownTensors();
  auto first = start();
  uploadKnown(*connect(*first), tensors);
  stop(first);

  // What a save cut off by kill -9 leaves: the previous file and a partial
  // temporary one. The temporary file is ignored, then written over.
  writeBytes(scratch_.state() / "tensors.safetensors.tmp", withPrefix(R"({"junk":)"));
  auto second = start();
  {
    auto client = connect(*second);
    expectHolds(*client, tensors);
    client->upload(DType::U8, {1}, std::vector<std::byte>{std::byte{1}}).save("later");
  }
  // kill -9: no save at all; the previous set is what the next start sees.
  second->signal(SIGKILL);
  second->stop();
  second.reset();
  auto third = start();
  {
    auto client = connect(*third);
    expectHolds(*client, tensors);
    EXPECT_NE(errorOf([&] { client->restore("later").info(); }).find("no tensor named 'later'"), std::string::npos);
  }
  stop(third);
  EXPECT_FALSE(fs::exists(scratch_.state() / "tensors.safetensors.tmp"));
}

TEST_F(CheckpointTest, AStateDirectoryOfTheEarlierFormatIsMigrated) {
  // The format before safetensors: a manifest and one raw file per tensor.
  const fs::path legacy = scratch_.state() / "tensors";
  fs::create_directories(legacy);
  std::vector<Known> tensors = {{"old/x", DType::F32, {2}, {}}, {"old/ids", DType::I64, {3}, {}}};
  tensors[0].bytes = std::vector<std::byte>(8, std::byte{0x3f});
  tensors[1].bytes = std::vector<std::byte>(24, std::byte{0x07});
  writeBytes(legacy / "1.bin", std::string(8, '\x3f'));
  writeBytes(legacy / "2.bin", std::string(24, '\x07'));
  std::ofstream(legacy / "manifest.json") << R"([
    {"names": ["old/x", "old/x2"], "owner": "tester", "dtype": "f32", "shape": [2], "bytes": 8, "file": "1.bin"},
    {"names": ["old/ids"], "owner": "tester", "dtype": "i64", "shape": [3], "bytes": 24, "file": "2.bin"}
  ])";
  auto first = start();
  {
    auto client = connect(*first);
    expectHolds(*client, tensors);
    EXPECT_EQ(client->restore("old/x2").info().id, client->restore("old/x").info().id);
  }
  stop(first);
  // Written anew in safetensors; the old directory is gone.
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_EQ(numpySide({"read", (scratch_.state() / "tensors.safetensors").string()})["tensors"].size(), 2u);
  auto second = start();
  expectHolds(*connect(*second), tensors);
  stop(second);
}

TEST_F(CheckpointTest, AnUnreadableStateFileIsKeptAsideAndNothingLoads) {
  writeBytes(scratch_.state() / "tensors.safetensors",
             withPrefix(R"({"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}})"));
  auto daemon = start();
  EXPECT_TRUE(connect(*daemon)->list().empty());
  EXPECT_NE(daemon->log().find("tensors.safetensors.corrupt"), std::string::npos) << daemon->log();
  stop(daemon);
  EXPECT_TRUE(fs::exists(scratch_.state() / "tensors.safetensors.corrupt"));
}

// loadFile and saveFile need their own rights, on top of the tensor rights.
class CheckpointPolicyTest : public PolicyDaemonTest {
 protected:
  CheckpointPolicyTest()
      : PolicyDaemonTest({"loader", "reader", "nofiles"}, R"({
          "principals": {
            "loader": {"rules": ["~m/*:rw", "&files:load"]},
            "reader": {"rules": ["~m/*:r", "~own/*:rw", "&files:*", "-&files:load"]},
            "nofiles": {"rules": ["~*:rwd", "+@all", "&admin:*"]}
          }})") {}

  DaemonOptions daemonOptions() override {
    DaemonOptions options = PolicyDaemonTest::daemonOptions();
    fs::create_directories(files());
    options.extra["files"] = {{"dirs", {files().string()}}};
    return options;
  }
  fs::path files() const { return policyDir() / "files"; }
};

TEST_F(CheckpointPolicyTest, LoadAndSaveNeedTheirRightsAndTheTensorRights) {
  writeBytes(
      files() / "m.safetensors",
      withPrefix(
          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})") +
          "abc");
  auto nofiles = as("nofiles");
  EXPECT_EQ(errorOf([&] { nofiles->loadFile("m.safetensors", "m/"); }),
            "permission denied: principal 'nofiles' may not load the file 'm.safetensors': no rule grants "
            "&files:load");
  EXPECT_NE(errorOf([&] { nofiles->saveFile("x.safetensors"); }).find("may not save to the file 'x.safetensors'"),
            std::string::npos);
  EXPECT_NE(audit().find("action=files:load"), std::string::npos) << audit();

  // The right to load, but not to write every name the file would make: nothing is loaded.
  auto loader = as("loader");
  EXPECT_NE(
      errorOf([&] { loader->loadFile("m.safetensors", "elsewhere/"); }).find("may not save a tensor as 'elsewhere/a'"),
      std::string::npos);
  EXPECT_EQ(loader->loadFile("m.safetensors", "m/").tensors.size(), 2u);
  EXPECT_NE(errorOf([&] { loader->saveFile("out.safetensors", {}, "m/"); }).find("no rule grants &files:save"),
            std::string::npos);

  // Saving writes only what the caller may read; a name it may not read looks missing.
  auto reader = as("reader");
  EXPECT_NE(errorOf([&] {
              reader->loadFile("m.safetensors", "own/");
            }).find("rule '-&files:load' of principal 'reader' denies it"),
            std::string::npos);
  EXPECT_EQ(reader->saveFile("out.safetensors", {}, "m/").tensors.size(), 2u);
  nofiles->upload(DType::U8, {1}, std::vector<std::byte>{std::byte{9}}).save("secret/x");
  EXPECT_EQ(errorOf([&] { reader->saveFile("leak.safetensors", {"secret/x"}); }),
            "saveFile: no tensor named 'secret/x'");
  EXPECT_FALSE(fs::exists(files() / "leak.safetensors"));
}

}  // namespace
}  // namespace tensord::testing
