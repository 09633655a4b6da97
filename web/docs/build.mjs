// Copies the renderer of the API docs page (Redoc's standalone browser bundle,
// installed from the npm registry by `npm ci`) into http/docsassets, where
// podsvc embeds it with go:embed. Run through `make docs`.
//
// Output (gitignored, except the placeholder README.md):
//   redoc.standalone.<sha256[:12]>.js   the bundle, content-hashed for immutable caching
//   redoc.standalone.<sha256[:12]>.js.gz  the same, gzip-compressed
//   THIRD_PARTY_LICENSES.txt            Redoc's licence and its bundle's licence notices
//   manifest.json                       written last; its presence means "built" to
//                                       http/docs.go and its mtime is make's stamp
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync, constants } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', '..', 'http', 'docsassets');
const pkgDir = join(here, 'node_modules', 'redoc');
const keep = new Set(['README.md']); // the committed placeholder

function fail(msg) {
  console.error(`web/docs/build.mjs: ${msg}`);
  process.exit(1);
}

let pkg;
try {
  pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
} catch (e) {
  fail(`redoc is not installed (${e.message}); run "npm ci" in web/docs first (make docs does)`);
}
const wanted = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8')).dependencies.redoc;
if (pkg.version !== wanted) {
  fail(`node_modules has redoc ${pkg.version}, package.json pins ${wanted}; run "npm ci"`);
}

let js = readFileSync(join(pkgDir, 'bundles', 'redoc.standalone.js'), 'utf8');

// The sidebar's "API docs by Redocly" credit loads its logo from Redocly's CDN.
// The page must make no request off its own origin (its CSP would block it
// anyway), so the image source is emptied: the component hides the image on
// error and keeps the text link. Fail loudly if a new version changed this.
const logo = '"https://cdn.redoc.ly/redoc/logo-mini.svg"';
const hits = js.split(logo).length - 1;
if (hits !== 1) {
  fail(`expected the Redocly CDN logo URL once in redoc ${pkg.version}'s bundle, found it ${hits} times: review the patch`);
}
js = js.replace(logo, '""');
// The source map is not shipped: drop the reference so browser tools don't
// ask for it.
js = js.replace(/\n\/\/# sourceMappingURL=\S+\s*$/, '\n');

const hash = createHash('sha256').update(js).digest('hex');
const script = `redoc.standalone.${hash.slice(0, 12)}.js`;

mkdirSync(out, { recursive: true });
for (const f of readdirSync(out)) {
  if (!keep.has(f)) rmSync(join(out, f), { recursive: true, force: true });
}

writeFileSync(join(out, script), js);
writeFileSync(join(out, script + '.gz'), gzipSync(js, { level: constants.Z_BEST_COMPRESSION }));

const notices = [
  `Redoc ${pkg.version} (https://github.com/Redocly/redoc), bundled as ${script}`,
  '',
  readFileSync(join(pkgDir, 'LICENSE'), 'utf8').trim(),
  '',
  'Licence notices of the code bundled inside redoc.standalone.js:',
  '',
  readFileSync(join(pkgDir, 'bundles', 'redoc.standalone.js.LICENSE.txt'), 'utf8').trim(),
  '',
].join('\n');
writeFileSync(join(out, 'THIRD_PARTY_LICENSES.txt'), notices);

const manifest = {
  renderer: 'redoc',
  version: pkg.version,
  script,
  sha256: hash,
  files: [script, 'THIRD_PARTY_LICENSES.txt'],
};
writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
console.log(`http/docsassets: ${script} (redoc ${pkg.version}, ${(js.length / 1024).toFixed(0)} KiB)`);
