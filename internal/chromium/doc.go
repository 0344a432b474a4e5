// Package chromium finds a Chromium (or Chrome) executable for the browser
// tests, installing Debian's chromium package with apt-get when none is found
// and the process is root, as CI is on a fresh machine. It is the browser
// counterpart of internal/pgcluster's FindBinaries.
package chromium
