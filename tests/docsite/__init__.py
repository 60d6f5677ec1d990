"""The docs site in a real browser: every page of the built site opened in headless Chromium."""
