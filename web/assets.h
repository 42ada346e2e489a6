// The web console's built files (web/dist of a Vite build), embedded in the
// binary at build time by web/embed.cmake, so that `tide server` serves the
// console with no other server, no CDN and no internet.
#pragma once

#include <cstddef>
#include <string_view>

namespace tide::web {

struct Asset {
  std::string_view path;  // "/index.html", "/assets/index-3f2a9c.js"
  std::string_view content_type;
  std::string_view body;
};

// The file served at `path`, or nullptr.
const Asset* FindAsset(std::string_view path);
// How many files there are, and their total size in bytes.
size_t AssetCount();
size_t AssetBytes();

}  // namespace tide::web
