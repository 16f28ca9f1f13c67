-- test_job_submit.lua - unit test of job_submit.lua with a fake `slurm`
-- table, run by `lua5.1 contrib/slurm/test_job_submit.lua` (from any
-- directory). The same script is exercised through real sbatch by
-- test/integration.
local dir = string.match(arg[0], "^(.*)/") or "."

local failures = 0
local function check(cond, fmt, ...)
   if not cond then
      failures = failures + 1
      io.stderr:write("FAIL: " .. string.format(fmt, ...) .. "\n")
   end
end

-- a model list in a temporary file
local list = os.tmpname()
local f = assert(io.open(list, "w"))
f:write("# test list\ngpt2\nbert # trailing comment\n  llama-7b  \n")
f:close()

-- load job_submit.lua with the list and an account class mapping
local src = assert(io.open(dir .. "/job_submit.lua")):read("*a")
local n
src, n = string.gsub(src, "\nlocal MODEL_TYPES_FILE = [^\n]*", "\nlocal MODEL_TYPES_FILE = \"" .. list .. "\"")
assert(n == 1, "MODEL_TYPES_FILE line not found")
src, n = string.gsub(src, "\nlocal CLASS_BY_ACCOUNT = [^\n]*", "\nlocal CLASS_BY_ACCOUNT = { physics = \"guaranteed\" }")
assert(n == 1, "CLASS_BY_ACCOUNT line not found")

local user_msgs = {}
slurm = {
   SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, INFINITE = 4294967295,
   log_info = function() end,
   log_user = function(fmt, ...) table.insert(user_msgs, string.format(fmt, ...)) end,
}
local chunk = assert(loadstring(src, "job_submit.lua"))
check(chunk() == slurm.SUCCESS, "script did not return slurm.SUCCESS")

local parts = { gpu = { name = "gpu", flag_default = 1 }, cpu = { name = "cpu", flag_default = 0 } }
local function spank(model) return { [0] = "OTHER=1", [1] = "RUBICK_MODEL_TYPE=" .. model } end

-- submit cases: job_desc -> expected rc, admin_comment, priority, requeue
local cases = {
   { name = "spank env, explicit managed partition",
     job = { partition = "gpu", spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=best-effort", prio = 0, requeue = 1 },
   { name = "default partition is managed",
     job = { spank_job_env = spank("bert") },
     rc = 0, ac = "rubick:v1 model=bert class=best-effort", prio = 0 },
   { name = "partition list containing a managed one",
     job = { partition = "cpu,gpu", spank_job_env = spank("bert") },
     rc = 0, ac = "rubick:v1 model=bert class=best-effort", prio = 0 },
   { name = "unmanaged partition untouched",
     job = { partition = "cpu", spank_job_env = spank("gpt2") },
     rc = 0, ac = nil, prio = nil },
   { name = "no model type untouched",
     job = { partition = "gpu", comment = "just a note", spank_job_env = { [0] = "A=B" } },
     rc = 0, ac = nil, prio = nil },
   { name = "existing admin comment kept, old tag replaced",
     job = { partition = "gpu", admin_comment = "site=x;rubick:v1 model=old;y=2", spank_job_env = spank("gpt2") },
     rc = 0, ac = "site=x;y=2;rubick:v1 model=gpt2 class=best-effort", prio = 0 },
   { name = "guaranteed by QOS",
     job = { partition = "gpu", qos = "guaranteed", spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=guaranteed", prio = 0 },
   { name = "guaranteed by default account",
     job = { partition = "gpu", default_account = "physics", spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=guaranteed", prio = 0 },
   { name = "comment fallback",
     job = { partition = "gpu", comment = "note; rubick:model=llama-7b" },
     rc = 0, ac = "rubick:v1 model=llama-7b class=best-effort", prio = 0 },
   { name = "comment word must be whole",
     job = { partition = "gpu", comment = "xrubick:model=gpt2" },
     rc = 0, ac = nil, prio = nil },
   { name = "spank env wins over comment",
     job = { partition = "gpu", comment = "rubick:model=bert", spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=best-effort", prio = 0 },
   { name = "malformed name rejected",
     job = { partition = "gpu", spank_job_env = spank("Bad Name") },
     rc = -1, msg = "invalid model type 'Bad Name'" },
   { name = "empty name rejected",
     job = { partition = "gpu", comment = "rubick:model=" },
     rc = -1, msg = "invalid model type ''" },
   { name = "unlisted name rejected",
     job = { partition = "gpu", spank_job_env = spank("vit") },
     rc = -1, msg = "unknown model type 'vit'" },
   { name = "sbatch --hold: the user's hold goes in the comment",
     job = { partition = "gpu", priority = 0, comment = "my note", spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=best-effort", prio = 0, comment = "my note rubick:hold" },
   { name = "sbatch --hold without a comment",
     job = { partition = "gpu", priority = 0, spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=best-effort", prio = 0, comment = "rubick:hold" },
   { name = "no hold, comment untouched",
     job = { partition = "gpu", priority = 4294967294, comment = "my note", spank_job_env = spank("gpt2") },
     rc = 0, ac = "rubick:v1 model=gpt2 class=best-effort", prio = 0, comment = "my note" },
   { name = "65 characters rejected",
     job = { partition = "gpu", spank_job_env = spank(string.rep("a", 65)) },
     rc = -1, msg = "invalid model type" },
}
for _, c in ipairs(cases) do
   user_msgs = {}
   local rc = slurm_job_submit(c.job, parts, 1000)
   check(rc == c.rc, "%s: rc %s, want %s", c.name, tostring(rc), tostring(c.rc))
   if c.rc == 0 then
      check(c.job.admin_comment == c.ac, "%s: admin_comment %q, want %q", c.name,
            tostring(c.job.admin_comment), tostring(c.ac))
      check(c.job.priority == c.prio, "%s: priority %s, want %s", c.name,
            tostring(c.job.priority), tostring(c.prio))
      if c.comment then
         check(c.job.comment == c.comment, "%s: comment %q, want %q", c.name,
               tostring(c.job.comment), c.comment)
      end
      if c.requeue then
         check(c.job.requeue == c.requeue, "%s: requeue %s", c.name, tostring(c.job.requeue))
      end
   else
      check(user_msgs[1] ~= nil and string.find(user_msgs[1], c.msg, 1, true) ~= nil,
            "%s: user message %q, want it to contain %q", c.name, tostring(user_msgs[1]), c.msg)
   end
end

-- A batch job it tags whose script never mentions rubick-srun gets a
-- notice, and is tagged and held all the same; salloc and srun (no script)
-- and jobs it does not tag get none.
local function script_job(script, file, extra)
   local job = { partition = "gpu", spank_job_env = spank("gpt2"), script = script }
   if file then job.argv = { [0] = file, [1] = "--lr=3e-4" } end
   for k, v in pairs(extra or {}) do job[k] = v end
   return job
end
local gpt2_tag = "rubick:v1 model=gpt2 class=best-effort"
local NOTICE = "runs no rubick-srun: rubickd may resize this job but cannot set its execution plan"
local plain = "#!/bin/bash\nsrun torchrun --nproc_per_node=8 train.py\n"
local notice_cases = {
   { name = "plain srun", job = script_job(plain, "jobs/train.sh"), rc = 0, notice = "rubick: jobs/train.sh " .. NOTICE,
     has = "(`rubick script jobs/train.sh` checks it)" },
   { name = "no file name (--wrap, stdin)", job = script_job(plain), rc = 0, notice = "rubick: this script " .. NOTICE,
     has = "(`rubick script FILE` checks it)" },
   { name = "a file name with a format character", job = script_job(plain, "100%s.sh"), rc = 0, notice = "rubick: 100%s.sh " .. NOTICE },
   { name = "sbatch --hold", job = script_job(plain, "train.sh", { priority = 0 }), rc = 0, notice = "rubick: train.sh " .. NOTICE },
   { name = "exec rubick-srun", job = script_job("#!/bin/bash\nexec rubick-srun -- python train.py\n", "train.sh"), rc = 0 },
   { name = "rubick-srun by its path", job = script_job("#!/bin/bash\n/opt/rubick/bin/rubick-srun --dialect megatron -- python x.py\n"), rc = 0 },
   { name = "rubick-srun in a comment", job = script_job("#!/bin/bash\n# launched by run.sh through rubick-srun\n./run.sh\n"), rc = 0 },
   { name = "no script (salloc, srun)", job = script_job(nil), rc = 0 },
   { name = "unmanaged partition", job = script_job(plain, "train.sh", { partition = "cpu" }), rc = 0, untagged = true },
   { name = "no model type", job = { partition = "gpu", script = plain, argv = { [0] = "train.sh" } }, rc = 0, untagged = true },
   { name = "refused model type", job = script_job(plain, "train.sh", { spank_job_env = spank("vit") }), rc = -1 },
}
for _, c in ipairs(notice_cases) do
   user_msgs = {}
   local rc = slurm_job_submit(c.job, parts, 1000)
   check(rc == c.rc, "notice %s: rc %s, want %s", c.name, tostring(rc), tostring(c.rc))
   if c.untagged then
      check(c.job.admin_comment == nil, "notice %s: admin_comment %q, want none", c.name, tostring(c.job.admin_comment))
   elseif c.rc == 0 then
      check(c.job.admin_comment == gpt2_tag and c.job.priority == 0, "notice %s: admin_comment %q, priority %s; want %q and 0",
            c.name, tostring(c.job.admin_comment), tostring(c.job.priority), gpt2_tag)
   end
   local notices = {}
   for _, m in ipairs(user_msgs) do
      if string.find(m, "rubick-srun", 1, true) then table.insert(notices, m) end
   end
   if c.notice then
      check(#notices == 1 and string.sub(notices[1], 1, #c.notice) == c.notice and not string.find(notices[1], "\n", 1, true) and
            (c.has == nil or string.find(notices[1], c.has, 1, true)),
            "notice %s: user messages %q, want one line starting %q with %q", c.name, table.concat(user_msgs, " | "), c.notice,
            tostring(c.has))
   else
      check(#notices == 0, "notice %s: user messages %q, want no notice", c.name, table.concat(user_msgs, " | "))
   end
end

-- modify: only SCHEDULER_UIDS may release a held managed job, and its
-- user their own hold (the comment word), which leaves it held for rubickd
local tag = "rubick:v1 model=gpt2 class=best-effort"
local managed = { job_id = 7, priority = 0, admin_comment = tag }
local function rec(prio, comment) return { job_id = 9, priority = prio, admin_comment = tag, comment = comment } end
local modify_cases = {
   { name = "user release refused", desc = { priority = 4294967295 }, rec = managed, uid = 1000, rc = 2002 },
   { name = "root release allowed", desc = { priority = 4294967295 }, rec = managed, uid = 0, rc = 0, prio = 4294967295 },
   { name = "user time limit change allowed", desc = { priority = 4294967294 }, rec = managed, uid = 1000, rc = 0, prio = 4294967294 },
   { name = "user hold marks the comment", desc = { priority = 0 }, rec = managed, uid = 1000, rc = 0, prio = 0, comment = "rubick:hold" },
   { name = "user hold keeps the comment", desc = { priority = 0 }, rec = rec(0, "my note"), uid = 1000, rc = 0, prio = 0,
     comment = "my note rubick:hold" },
   { name = "user hold of a released job", desc = { priority = 0 }, rec = rec(5000, "a;b"), uid = 1000, rc = 0, prio = 0,
     comment = "a;b rubick:hold" },
   { name = "second hold", desc = { priority = 0 }, rec = rec(0, "rubick:hold"), uid = 1000, rc = 0, prio = 0, comment = "rubick:hold" },
   { name = "user release of their hold: held for rubickd", desc = { priority = 4294967295 }, rec = rec(0, "my note rubick:hold"),
     uid = 1000, rc = 0, prio = 4294967294, comment = "my note" },
   { name = "release keeps other words", desc = { priority = 4294967295 }, rec = rec(0, "a;rubick:hold;rubick:holder b"),
     uid = 1000, rc = 0, prio = 4294967294, comment = "a;rubick:holder b" },
   { name = "release of a word written twice", desc = { priority = 4294967295 }, rec = rec(0, "rubick:hold rubick:hold x"),
     uid = 1000, rc = 0, prio = 4294967294, comment = "x" },
   { name = "release of the word alone", desc = { priority = 4294967295 }, rec = rec(0, "rubick:hold"),
     uid = 1000, rc = 0, prio = 4294967294, comment = " " },
   { name = "a word that is not the hold", desc = { priority = 4294967295 }, rec = rec(0, "rubick:holder"), uid = 1000, rc = 2002 },
   { name = "release of a released job", desc = { priority = 4294967295 }, rec = rec(5000, nil), uid = 1000, rc = 0, prio = 4294967295 },
   { name = "root release of the user's hold: held for rubickd", desc = { priority = 4294967295 }, rec = rec(0, "rubick:hold"),
     uid = 0, rc = 0, prio = 4294967294, comment = " ", ac = tag .. ";rubick-held" },
   { name = "root hold of a released job is Slurm's", desc = { priority = 0 }, rec = rec(5000, "x"), uid = 0, rc = 0, prio = 0, comment = nil },
   -- a new comment of a job its user holds keeps the word (before, it went,
   -- the user's release was refused and rubickd started the job)
   { name = "user's new comment keeps their hold", desc = { comment = "my new note" }, rec = rec(0, "my note rubick:hold"), uid = 1000,
     rc = 0, comment = "my new note rubick:hold" },
   { name = "root's new comment keeps the user's hold", desc = { comment = "x" }, rec = rec(0, "rubick:hold"), uid = 0,
     rc = 0, comment = "x rubick:hold" },
   { name = "a new comment with the word", desc = { comment = "rubick:hold n" }, rec = rec(0, "rubick:hold"), uid = 1000,
     rc = 0, comment = "rubick:hold n" },
   { name = "a new comment of a job rubick holds", desc = { comment = "n" }, rec = rec(0, nil), uid = 1000, rc = 0, comment = "n" },
   -- an administrator's hold of a job rubickd holds stays rubick's, marked
   { name = "root hold of a held job is marked", desc = { priority = 0 }, rec = managed, uid = 0, rc = 0, prio = 4294967294,
     ac = tag .. ";rubick-admin-hold" },
   { name = "root hold keeps other fields", desc = { priority = 0 },
     rec = { job_id = 9, priority = 0, admin_comment = "site=x;" .. tag }, uid = 0, rc = 0, prio = 4294967294,
     ac = "site=x;" .. tag .. ";rubick-admin-hold" },
   { name = "second root hold", desc = { priority = 0 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold" }, uid = 0, rc = 0, prio = 4294967294,
     ac = tag .. ";rubick-admin-hold" },
   { name = "root release of its hold: held for rubickd", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = "a;rubick-admin-hold;" .. tag }, uid = 0, rc = 0, prio = 4294967294,
     ac = "a;" .. tag .. ";rubick-held" },
   { name = "root release of both holds", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold", comment = "n rubick:hold" },
     uid = 0, rc = 0, prio = 4294967294, ac = tag .. ";rubick-held", comment = "n" },
   -- rubick-held: a hold Slurm names an administrator's that is rubick's;
   -- the release that starts the job takes it out
   { name = "rubickd's release takes rubick-held out", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = "a;" .. tag .. ";rubick-held" }, uid = 0, rc = 0, prio = 4294967295,
     ac = "a;" .. tag },
   { name = "root hold of a rubick-held job", desc = { priority = 0 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-held" }, uid = 0, rc = 0, prio = 4294967294,
     ac = tag .. ";rubick-held;rubick-admin-hold" },
   { name = "user release of a rubick-held job refused", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-held" }, uid = 1000, rc = 2002 },
   { name = "user release of the administrator's hold refused", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold", comment = "rubick:hold" }, uid = 1000, rc = 2002,
     msg = "held by an administrator" },
   { name = "user hold of an administrator's hold", desc = { priority = 0 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold" }, uid = 1000, rc = 0, prio = 0,
     comment = "rubick:hold" },
   -- moved out of the managed partitions while rubickd holds it: released
   { name = "moved out: released", desc = { partition = "debug" }, rec = managed, uid = 1000, rc = 0, prio = 4294967295,
     msg = "moved out" },
   { name = "moved out by root: released", desc = { partition = "debug", time_limit = 60 }, rec = managed, uid = 0, rc = 0,
     prio = 4294967295 },
   { name = "moved to another managed one: held", desc = { partition = "debug,gpu" }, rec = managed, uid = 1000, rc = 0 },
   { name = "moved out, held by its user: held", desc = { partition = "debug" }, rec = rec(0, "rubick:hold"), uid = 1000, rc = 0,
     prio = nil },
   { name = "moved out, held by an administrator: held", desc = { partition = "debug" },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold" }, uid = 1000, rc = 0 },
   { name = "moved out once released", desc = { partition = "debug" }, rec = rec(5000, nil), uid = 1000, rc = 0 },
   { name = "moved out, rubick-held: released, mark out", desc = { partition = "debug" },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-held" }, uid = 0, rc = 0, prio = 4294967295, ac = tag },
   { name = "moved out by its user, rubick-held: refused", desc = { partition = "debug" },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-held" }, uid = 1000, rc = 2002,
     msg = "only they can move it out" },
   -- outside the managed partitions (moved out, or MANAGED_PARTITIONS
   -- emptied) holds and releases are Slurm's own, but an administrator's
   { name = "unmanaged: user release", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu" }, uid = 1000, rc = 0, prio = 4294967295 },
   { name = "unmanaged: user release of their hold", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu", comment = "n rubick:hold" }, uid = 1000, rc = 0,
     prio = 4294967295, comment = "n" },
   { name = "unmanaged: user release of an administrator's hold", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold", partition = "cpu" }, uid = 1000, rc = 2002,
     msg = "held by an administrator" },
   { name = "unmanaged: root release of an administrator's hold", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold", partition = "cpu" }, uid = 0, rc = 0,
     prio = 4294967295, ac = tag },
   { name = "unmanaged: user hold is Slurm's", desc = { priority = 0 },
     rec = { job_id = 9, priority = 5000, admin_comment = tag, partition = "cpu" }, uid = 1000, rc = 0, prio = 0 },
   { name = "unmanaged: root hold is Slurm's", desc = { priority = 0 },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu" }, uid = 0, rc = 0, prio = 0 },
   { name = "unmanaged: moved between unmanaged partitions, held by its user: held", desc = { partition = "debug" },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu" }, uid = 1000, rc = 0, prio = nil },
   { name = "unmanaged: moved between unmanaged partitions by root, held: held", desc = { partition = "debug" },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu" }, uid = 0, rc = 0, prio = nil },
   { name = "unmanaged: release takes rubick-held out", desc = { priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-held", partition = "cpu" }, uid = 0, rc = 0,
     prio = 4294967295, ac = tag },
   -- a pending job with a model type moved into a managed partition: tagged
   -- and held for rubickd as at submission; a hold it has stays, its user's
   { name = "moved in by its user: refused (untagged)", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu", spank_job_env = spank("gpt2") }, uid = 1000, rc = 2002,
     msg = "submitted outside" },
   { name = "moved in by root: tagged, held, marked rubick's", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu", spank_job_env = spank("gpt2") }, uid = 0, rc = 0,
     prio = 0, ac = tag .. ";rubick-held", requeue = 1, msg = "moved into" },
   { name = "moved in held: the user's hold", desc = { partition = "cpu,gpu" },
     rec = { job_id = 8, job_state = 0, priority = 0, partition = "cpu", comment = "n", spank_job_env = spank("gpt2") },
     uid = 0, rc = 0, ac = tag, comment = "n rubick:hold", requeue = 1 },
   { name = "moved in held, with a release", desc = { partition = "gpu", priority = 4294967295 },
     rec = { job_id = 8, job_state = 0, priority = 0, partition = "cpu", spank_job_env = spank("gpt2") },
     uid = 0, rc = 0, prio = 4294967294, ac = tag, comment = "rubick:hold", requeue = 1 },
   { name = "moved in: model from the comment, other fields kept", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu", comment = "x rubick:model=bert",
             admin_comment = "site=x", qos = "guaranteed" },
     uid = 0, rc = 0, prio = 0, ac = "site=x;rubick:v1 model=bert class=guaranteed;rubick-held", requeue = 1 },
   { name = "moved in: model from the comment set with the move", desc = { partition = "gpu", comment = "rubick:model=gpt2" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu" }, uid = 0, rc = 0, prio = 0, ac = tag .. ";rubick-held",
     comment = "rubick:model=gpt2", requeue = 1 },
   { name = "moved in without a model type: untouched", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu", comment = "n" }, uid = 0, rc = 0 },
   { name = "moved in with a malformed model type: refused", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu", spank_job_env = spank("Bad") }, uid = 0, rc = -1,
     msg = "invalid model type 'Bad'" },
   { name = "moved in with an unlisted model type: refused", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 0, priority = 5000, partition = "cpu", comment = "rubick:model=vit" }, uid = 0, rc = -1,
     msg = "unknown model type 'vit'" },
   { name = "a running job is not moved in", desc = { partition = "gpu" },
     rec = { job_id = 8, job_state = 1, priority = 5000, partition = "cpu", spank_job_env = spank("gpt2") }, uid = 0, rc = 0 },
   { name = "moved back in by its user: held again", desc = { partition = "gpu" },
     rec = { job_id = 9, job_state = 0, priority = 5000, admin_comment = tag, partition = "cpu" }, uid = 1000, rc = 0,
     prio = 0, requeue = 1 },
   { name = "moved back in held by its user", desc = { partition = "gpu" },
     rec = { job_id = 9, job_state = 0, priority = 0, admin_comment = tag, partition = "cpu" }, uid = 1000, rc = 0,
     comment = "rubick:hold", requeue = 1 },
   { name = "moved back in held by an administrator: theirs", desc = { partition = "gpu" },
     rec = { job_id = 9, job_state = 0, priority = 0, admin_comment = tag .. ";rubick-admin-hold", partition = "cpu" },
     uid = 0, rc = 0, requeue = 1 },
   -- priority/basic ends a hold at a new nice, and the job would start as
   -- it is (NICE_KEEPS_HOLD = false)
   { name = "new nice of a held job refused", desc = { nice = 2147483748 }, rec = managed, uid = 1000, rc = 2042,
     msg = "a new nice would release it" },
   { name = "new nice of a held job refused for root", desc = { nice = 2147483548 }, rec = rec(0, "rubick:hold"), uid = 0,
     rc = 2042 },
   { name = "new nice of a released job", desc = { nice = 2147483748 }, rec = rec(5000, nil), uid = 1000, rc = 0 },
   { name = "no new nice", desc = { nice = 4294967294, time_limit = 60 }, rec = managed, uid = 1000, rc = 0 },
   { name = "unmanaged: new nice is Slurm's", desc = { nice = 2147483748 },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu" }, uid = 1000, rc = 0 },
   -- a new QOS or account gives a tagged job its class; only an
   -- administrator can write it, so a user's change of class is refused
   { name = "root: new QOS makes it guaranteed", desc = { qos = "guaranteed" },
     rec = { job_id = 9, priority = 0, admin_comment = "site=x;" .. tag .. " gen=2 ran=5;rubick-admin-hold", qos = "normal" },
     uid = 0, rc = 0, ac = "site=x;rubick:v1 model=gpt2 class=guaranteed gen=2 ran=5;rubick-admin-hold" },
   { name = "root: new account makes it guaranteed", desc = { account = "physics" },
     rec = { job_id = 9, priority = 5000, admin_comment = tag, qos = "normal", account = "chem" }, uid = 0, rc = 0,
     ac = "rubick:v1 model=gpt2 class=guaranteed" },
   { name = "root: back to best-effort", desc = { qos = "normal" },
     rec = { job_id = 9, priority = 0, admin_comment = "rubick:v1 model=gpt2 class=guaranteed", qos = "guaranteed" }, uid = 0, rc = 0,
     ac = tag },
   { name = "root: a tag without a class gets one", desc = { qos = "guaranteed" },
     rec = { job_id = 9, priority = 0, admin_comment = "rubick:v1 model=gpt2", qos = "normal" }, uid = 0, rc = 0,
     ac = "rubick:v1 model=gpt2 class=guaranteed" },
   { name = "root: new QOS and a release", desc = { qos = "guaranteed", priority = 4294967295 },
     rec = { job_id = 9, priority = 0, admin_comment = tag .. ";rubick-admin-hold", qos = "normal" }, uid = 0, rc = 0,
     prio = 4294967294, ac = "rubick:v1 model=gpt2 class=guaranteed;rubick-held" },
   { name = "user: new QOS of the same class", desc = { qos = "low" }, rec = { job_id = 9, priority = 0, admin_comment = tag, qos = "normal" },
     uid = 1000, rc = 0 },
   { name = "user: new QOS that makes it guaranteed refused", desc = { qos = "guaranteed" },
     rec = { job_id = 9, priority = 0, admin_comment = tag, qos = "normal" }, uid = 1000, rc = 2002,
     msg = "only an administrator can change" },
   { name = "user: new account that makes it guaranteed refused", desc = { account = "physics" },
     rec = { job_id = 9, priority = 5000, admin_comment = tag, account = "chem" }, uid = 1000, rc = 2002,
     msg = "that would make job 9 guaranteed" },
   { name = "unmanaged: new QOS is Slurm's", desc = { qos = "guaranteed" },
     rec = { job_id = 9, priority = 0, admin_comment = tag, partition = "cpu", qos = "normal" }, uid = 1000, rc = 0 },
   { name = "untagged job untouched", desc = { priority = 4294967295 },
     rec = { job_id = 8, priority = 0, admin_comment = "site=x", comment = "rubick:hold" }, uid = 1000, rc = 0, prio = 4294967295 },
}
for _, c in ipairs(modify_cases) do
   user_msgs = {}
   local rc = slurm_job_modify(c.desc, c.rec, parts, c.uid)
   check(rc == c.rc, "modify %s: rc %s, want %s", c.name, tostring(rc), tostring(c.rc))
   -- refusals are Slurm's "Access/permission denied" (2002), which 22.05
   -- shows where it shows no log_user message
   if c.rc == 0 then
      check(c.desc.priority == c.prio, "modify %s: priority %s, want %s", c.name, tostring(c.desc.priority), tostring(c.prio))
      check(c.desc.comment == c.comment, "modify %s: comment %q, want %q", c.name, tostring(c.desc.comment), tostring(c.comment))
      check(c.desc.admin_comment == c.ac, "modify %s: admin_comment %q, want %q", c.name, tostring(c.desc.admin_comment), tostring(c.ac))
      check(c.desc.requeue == c.requeue, "modify %s: requeue %s, want %s", c.name, tostring(c.desc.requeue), tostring(c.requeue))
   end
   if c.msg then
      local last = user_msgs[#user_msgs]
      check(last ~= nil and string.find(last, c.msg, 1, true) ~= nil,
            "modify %s: user message %q, want it to contain %q", c.name, tostring(last), c.msg)
   end
end

-- An update of a whole job array is one request, which Slurm hands to the
-- script for each record of the array in turn and applies to it, edits
-- included: a proxy like Slurm's (its metatable names the C request; an
-- empty string sets no value), numbers unset as NO_VAL.
local function request(fields)
   local store = { priority = slurm.NO_VAL, requeue = 65534 }
   for k, v in pairs(fields) do store[k] = v end
   return setmetatable({}, { _job_desc = {}, __index = store,
      __newindex = function(_, k, v) if v == "" then v = nil end store[k] = v end })
end
local function apply(desc, rec)
   for _, f in ipairs({ "admin_comment", "comment" }) do
      if desc[f] ~= nil then rec[f] = desc[f] end
   end
   if desc.priority ~= slurm.NO_VAL then rec.priority = desc.priority end
end
for _, tc in ipairs({
   -- Task 1 was released from its user's hold; the others were not.
   { name = "user's new comment", desc = { comment = "new" }, uid = 1000,
     rc = { 0, 0 }, comment = { "new rubick:hold", "new" }, prio = { 0, 0 } },
   { name = "user's release", desc = { priority = slurm.INFINITE }, uid = 1000,
     rc = { 0, 2002 }, comment = { "note", "note" }, prio = { 0, 0 } },
   { name = "user's hold", desc = { priority = 0 }, uid = 1000,
     rc = { 0, 0 }, comment = { "note rubick:hold", "note rubick:hold" }, prio = { 0, 0 } },
   { name = "root's release", desc = { priority = slurm.INFINITE }, uid = 0,
     rc = { 0, 0 }, comment = { "note", "note" }, prio = { 0, slurm.INFINITE },
     ac = { tag .. ";rubick-held", tag } },
}) do
   local recs = {
      { job_id = 20, array_job_id = 20, priority = 0, admin_comment = tag, comment = "note rubick:hold" },
      { job_id = 21, array_job_id = 20, priority = 0, admin_comment = tag .. ";rubick-held", comment = "note" },
   }
   local desc = request(tc.desc)
   for i, rec in ipairs(recs) do
      local rc = slurm_job_modify(desc, rec, parts, tc.uid)
      check(rc == tc.rc[i], "whole array, %s: record %d rc %s, want %s", tc.name, i, tostring(rc), tostring(tc.rc[i]))
      if rc == 0 then apply(desc, rec) end
      check(rec.comment == tc.comment[i] and rec.priority == tc.prio[i],
            "whole array, %s: record %d comment %q, priority %s; want %q, %s", tc.name, i,
            tostring(rec.comment), tostring(rec.priority), tc.comment[i], tostring(tc.prio[i]))
      if tc.ac then
         check(rec.admin_comment == tc.ac[i], "whole array, %s: record %d admin_comment %q, want %q",
               tc.name, i, tostring(rec.admin_comment), tc.ac[i])
      end
   end
end
-- The same record again is a new request, with the values it was sent.
do
   local desc = request({ comment = "mine rubick:hold" })
   local rec = { job_id = 22, priority = 0, admin_comment = tag, comment = "x rubick:hold" }
   local rc1 = slurm_job_modify(desc, rec, parts, 1000)
   local rc2 = slurm_job_modify(desc, rec, parts, 1000)
   check(rc1 == 0 and rc2 == 0 and desc.comment == "mine rubick:hold",
         "the same record twice: rc %s, %s, comment %q; want 0, 0 and the one sent", tostring(rc1), tostring(rc2),
         tostring(desc.comment))
end

-- priority/multifactor keeps the hold at a new nice (NICE_KEEPS_HOLD = true)
src, n = string.gsub(src, "\nlocal NICE_KEEPS_HOLD = false", "\nlocal NICE_KEEPS_HOLD = true")
assert(n == 1, "NICE_KEEPS_HOLD line not found")
chunk = assert(loadstring(src, "job_submit.lua"))
check(chunk() == slurm.SUCCESS, "script did not return slurm.SUCCESS")
do
   local desc = { nice = 2147483748 }
   local rc = slurm_job_modify(desc, managed, parts, 1000)
   check(rc == 0 and desc.priority == nil, "new nice of a held job, NICE_KEEPS_HOLD: rc %s, priority %s, want 0 and none",
         tostring(rc), tostring(desc.priority))
end

-- A site may switch the notice off (WARN_NO_RUBICK_SRUN = false).
do
   local s2, n2 = string.gsub(src, "\nlocal WARN_NO_RUBICK_SRUN = true", "\nlocal WARN_NO_RUBICK_SRUN = false")
   assert(n2 == 1, "WARN_NO_RUBICK_SRUN line not found")
   chunk = assert(loadstring(s2, "job_submit.lua"))
   check(chunk() == slurm.SUCCESS, "script did not return slurm.SUCCESS")
   user_msgs = {}
   local job = script_job(plain, "train.sh")
   local rc = slurm_job_submit(job, parts, 1000)
   check(rc == 0 and job.admin_comment == tag and #user_msgs == 0,
         "WARN_NO_RUBICK_SRUN false: rc %s, admin_comment %q, user messages %q; want 0, %q and none",
         tostring(rc), tostring(job.admin_comment), table.concat(user_msgs, " | "), tag)
end

-- A model type list that is there but cannot be read refuses model types
-- (fail closed), where an absent one checks only their syntax.
for _, tc in ipairs({
   { file = "/etc/passwd/model-types", rc = slurm.ERROR, msg = "cannot be read" }, -- ENOTDIR: not ENOENT
   { file = list .. ".absent", rc = 0 },
}) do
   local errors = {}
   slurm.log_error = function(fmt, ...) table.insert(errors, string.format(fmt, ...)) end
   local s2 = string.gsub(src, "\nlocal MODEL_TYPES_FILE = [^\n]*", "\nlocal MODEL_TYPES_FILE = \"" .. tc.file .. "\"")
   chunk = assert(loadstring(s2, "job_submit.lua"))
   check(chunk() == slurm.SUCCESS, "script did not return slurm.SUCCESS")
   user_msgs = {}
   local job = { partition = "gpu", spank_job_env = spank("notlisted") }
   local rc = slurm_job_submit(job, parts, 1000)
   local last = user_msgs[#user_msgs] or ""
   check(rc == tc.rc, "model list %s: rc %s, want %s", tc.file, tostring(rc), tostring(tc.rc))
   if tc.msg then
      check(string.find(last, tc.msg, 1, true) ~= nil and #errors == 1,
            "model list %s: user message %q, %d error(s) logged; want %q and one", tc.file, last, #errors, tc.msg)
   end
end

os.remove(list)
if failures > 0 then
   io.stderr:write(string.format("test_job_submit: %d failure(s)\n", failures))
   os.exit(1)
end
print("test_job_submit: ok")
