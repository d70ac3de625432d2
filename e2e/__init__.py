"""Browser end-to-end tests: Playwright driving Debian chromium against web/ and a real gateway."""
