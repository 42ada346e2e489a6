// Builds the console into dist/, which `tide server` embeds and serves at /.
// The server's Content-Security-Policy allows only same-origin scripts and
// styles, so the output must hold no inline script or style: one module
// entry, one stylesheet, hashed files under /assets/.
//
// `npx vite` serves the sources with hot reload and forwards the API to a
// running `tide dev` (TIDE_SERVER, default http://127.0.0.1:8080).
import { defineConfig } from 'vite';

const server = process.env.TIDE_SERVER || 'http://127.0.0.1:8080';

export default defineConfig({
  base: '/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    sourcemap: false,
    target: 'es2020',
    // Anything small would otherwise become a data: URL; keep every asset a file.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
  },
  server: {
    proxy: {
      // The Host header stays the dev server's, so the session cookie and the
      // server's same-origin checks see one origin.
      '/v1': { target: server, changeOrigin: false, ws: false },
      '/login': { target: server, changeOrigin: false },
    },
  },
});
