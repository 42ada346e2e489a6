// `tide outputs ID [--get DIR] [-o json]`: lists the files a job left in
// $TIDE_OUTPUT_DIR, or downloads all of them into DIR.
//
// Paths come from the server and are relative; any that is absolute or
// contains ".." is refused (and reported) rather than written, so a download
// never writes outside DIR. Exit code 1 if any file failed.
#include <filesystem>
#include <iostream>

#include "api/http_client.h"
#include "cli/common.h"
#include "common/paths.h"

namespace tide::cli {

namespace {

struct OutputsOptions {
  std::string id;
  std::string get_dir;
  OutputFormat format = OutputFormat::kTable;
};

int Download(api::Client& client, const OutputsOptions& opts, const json& files) {
  int code = kExitOk;
  int64_t total = 0;
  int count = 0;
  json written = json::array();
  for (const auto& f : files) {
    std::string path = JsonString(f, "path");
    auto clean = CleanRelativePath(path);
    if (!clean.ok()) {
      code = PrintError(clean.status().WithContext("refusing output \"" + path + "\""));
      continue;
    }
    auto data = client.GetOutput(opts.id, path);
    if (!data.ok()) {
      code = PrintError(data.status().WithContext("download " + path));
      continue;
    }
    std::string local = (std::filesystem::path(opts.get_dir) / *clean).string();
    Status st = WriteFileAtomic(local, *data);
    if (!st.ok()) {
      code = PrintError(st);
      continue;
    }
    int64_t size = static_cast<int64_t>(data->size());
    total += size;
    ++count;
    if (opts.format == OutputFormat::kJson) {
      written.push_back({{"path", *clean}, {"size", size}, {"local_path", local}});
    } else {
      std::cout << local << "  " << FormatBytes(size) << "\n";
    }
  }
  if (opts.format == OutputFormat::kJson) {
    PrintJson(written);
  } else {
    std::cout << "Downloaded " << count << (count == 1 ? " file" : " files") << " ("
              << FormatBytes(total) << ") to " << opts.get_dir << "\n";
  }
  return code;
}

int RunOutputs(const OutputsOptions& opts) {
  auto client = NewClient();
  if (!client.ok()) return PrintError(client.status());
  auto listing = (*client)->Call("GET", "/v1/jobs/" + api::UrlEncode(opts.id) + "/outputs");
  if (!listing.ok()) return PrintError(listing.status());
  json files = listing->contains("files") && (*listing)["files"].is_array() ? (*listing)["files"]
                                                                            : json::array();
  if (!opts.get_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opts.get_dir, ec);
    if (ec) return PrintError(Status::Internal("create " + opts.get_dir + ": " + ec.message()));
    return Download(**client, opts, files);
  }
  if (opts.format == OutputFormat::kJson) {
    PrintJson(files);
    return kExitOk;
  }
  if (files.empty()) {
    std::cout << "No outputs.\n";
    return kExitOk;
  }
  Table table({"PATH", "SIZE"});
  for (const auto& f : files) {
    table.AddRow({JsonString(f, "path"), FormatBytes(JsonInt(f, "size"))});
  }
  std::cout << table.ToString();
  return kExitOk;
}

}  // namespace

void AddOutputsCommand(CLI::App& app) {
  auto opts = std::make_shared<OutputsOptions>();
  CLI::App* cmd = app.add_subcommand("outputs", "List a job's output files, or download them");
  cmd->add_option("id", opts->id, "Job id")->required();
  cmd->add_option("--get", opts->get_dir, "Download every output file into this directory");
  AddOutputFlag(cmd, &opts->format);
  SetAction(cmd, [opts] { return RunOutputs(*opts); });
}

}  // namespace tide::cli
