"""Crawl input: records, files and archives in; decoded pages out."""
