"""The reporting stage, after training: it reads a run folder (run_folder), draws its curves
(plots), writes its page (run_page) and report (report: loss.png, run.html, the closing line)."""
