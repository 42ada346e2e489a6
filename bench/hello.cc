// tide-hello: a plain C++ program (iostream, the shared libstdc++), the
// start-up tide-drain sets `tide --version` beside.
#include <iostream>

int main() {
  std::cout << "hello\n";
  return 0;
}
