#include "pararnn/reports/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "pararnn/core/errors.hpp"

extern char** environ;

namespace pararnn::reports {
namespace {

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("cannot create a pipe ({})", std::strerror(errno)));
  }
  ~Pipe() {
    for (int& fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void close_end(int i) {
    if (fds[i] >= 0) ::close(fds[i]);
    fds[i] = -1;
  }
};

}  // namespace

namespace {

// The inherited environment, less the variables removed or replaced, plus those set.
std::vector<std::string> environment_for(const ProcessOptions& options) {
  std::vector<std::string> env;
  const auto named = [](const std::string& entry, const std::string& name) {
    return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=';
  };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    bool drop = false;
    for (const auto& name : options.unset_env) drop = drop || named(entry, name);
    for (const auto& [name, value] : options.set_env) drop = drop || named(entry, name);
    if (!drop) env.push_back(entry);
  }
  for (const auto& [name, value] : options.set_env) env.push_back(name + "=" + value);
  return env;
}

void keep_stderr(std::string& kept, const char* data, std::size_t n, bool tail) {
  constexpr std::size_t kKeep = 65536;
  if (!tail) {
    if (kept.size() < kKeep) kept.append(data, n);
    return;
  }
  kept.append(data, n);
  if (kept.size() > kKeep) kept.erase(0, kept.size() - kKeep);
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, std::ostream* out, const ProcessOptions& options) {
  if (argv.empty()) throw Error("run_process: empty argv");
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Pipe out_pipe, err_pipe;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe.fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe.fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);  // its own group: a timeout kills its children too
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings = environment_for(options);
  std::vector<char*> env;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attributes, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  out_pipe.close_end(1);
  err_pipe.close_end(1);
  ProcessResult result;
  if (rc != 0) {
    result.exit_code = 127;
    result.stderr_text = fmt::format("cannot start {}: {}", argv[0], std::strerror(rc));
    return result;
  }
  std::array<pollfd, 2> fds = {pollfd{out_pipe.fds[0], POLLIN, 0}, pollfd{err_pipe.fds[0], POLLIN, 0}};
  std::array<char, 65536> buffer;
  int open_fds = 2;
  std::optional<double> drain_until;  // after a kill: a child that left the group may hold the pipes
  while (open_fds > 0) {
    int wait_ms = -1;
    if (options.timeout_s && !result.timed_out) {
      const double left = *options.timeout_s - elapsed();
      if (left <= 0.0) {
        result.timed_out = true;
        ::kill(-pid, SIGKILL);
        drain_until = elapsed() + 2.0;
        continue;
      }
      wait_ms = static_cast<int>(std::min(left * 1000.0, 1000.0)) + 1;
    }
    if (drain_until) {
      if (elapsed() > *drain_until) break;
      wait_ms = 200;
    }
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        if (i == 0 && out) out->write(buffer.data(), n);
        if (i == 1) keep_stderr(result.stderr_text, buffer.data(), static_cast<std::size_t>(n), options.keep_stderr_tail);
      } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  result.wall_s = elapsed();
  return result;
}

ProcessResult run_process(const std::vector<std::string>& argv, std::ostream* out, const std::filesystem::path& cwd) {
  return run_process(argv, out, ProcessOptions{.cwd = cwd});
}

bool program_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view rest(path);
  while (true) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

ScratchDirectory::ScratchDirectory(const std::filesystem::path& parent, const std::string& prefix) {
  std::string pattern = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw Error(fmt::format("cannot create a scratch directory {} ({})", pattern, std::strerror(errno)));
  path_ = pattern;
}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace pararnn::reports
