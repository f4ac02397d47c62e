"""data/ holds a site's own content (an Ansible role, testinfra checks): input, not tests of ours."""

collect_ignore_glob = ["data/*"]
